"""Write the worked example of include/hyfi.h (between [example] and
[/example]) to a C file, so that the build compiles exactly what users read."""
import sys

src, out = sys.argv[1], sys.argv[2]
lines, on = [], False
for line in open(src, encoding="utf-8"):
    if "[/example]" in line:
        break
    if on:
        text = line.rstrip("\n")
        text = text[3:] if text.startswith(" * ") else text.lstrip(" *")
        lines.append(text[4:] if text.startswith("    ") else text)
    elif "[example]" in line:
        on = True
if not lines:
    sys.exit("no [example] block in " + src)
with open(out, "w", encoding="utf-8") as f:
    f.write("/* Generated from include/hyfi.h by tests/extract_example.py. */\n")
    f.write("\n".join(lines) + "\n")
