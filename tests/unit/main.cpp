// doctest's implementation and entry point, linked into every doctest program (tests/meson.build).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
