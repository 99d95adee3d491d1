// doctest entry point for the unit tests (no daemon, no other processes).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
