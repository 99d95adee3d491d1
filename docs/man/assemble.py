#!/usr/bin/env python3
"""Puts the generated SETTINGS section (nicemu --help-config=scdoc) into a man page source
at the line @SETTINGS@. Usage: assemble.py PAGE.scd SETTINGS.scd OUTPUT.scd"""
import sys

page, settings, output = sys.argv[1:4]
text = open(page, encoding="utf-8").read()
if "\n@SETTINGS@\n" not in text:
    sys.exit(f"{page}: no @SETTINGS@ line")
with open(output, "w", encoding="utf-8") as out:
    out.write(text.replace("\n@SETTINGS@\n", "\n" + open(settings, encoding="utf-8").read().rstrip("\n") + "\n"))
