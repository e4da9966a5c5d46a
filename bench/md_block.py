"""Writes a generated block into a markdown file between `<!-- NAME:begin -->` and
`<!-- NAME:end -->`, replacing what stood there, or appends it when the markers are missing.
`lines` includes both markers (the reports write them, with their table between)."""
import os


def write_block(md, name, lines):
    begin_mark, end_mark = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = open(md).read() if os.path.exists(md) else ""
    begin, end = text.find(begin_mark), text.find(end_mark)
    block = "\n".join(lines)
    if begin >= 0 and end > begin:
        text = text[:begin] + block + text[end + len(end_mark):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    open(md, "w").write(text)
