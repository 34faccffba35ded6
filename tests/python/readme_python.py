"""Every ```python block of the README runs (issue 16: a promise in the README is a test)."""
import re
import sys

readme = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
assert blocks, "the README has no python block"
for number, block in enumerate(blocks, 1):
    try:
        exec(compile(block, f"README python block {number}", "exec"), {})
    except Exception as e:
        print(f"README python block {number} fails: {e!r}\n{block}", file=sys.stderr)
        raise
print(f"readme_python: {len(blocks)} README blocks run")
