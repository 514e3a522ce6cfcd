#!/usr/bin/env python3
"""check_links.py — every relative link in specd's Markdown resolves.

  check_links.py ROOT

The files: every *.md git lists in ROOT (tracked, or new and not ignored;
none under node_modules/ or build/), or, where ROOT is not a git work tree,
every *.md under it. In each, every link — inline [text](target), images,
reference definitions [label]: target and HTML href / src — outside code
spans and code blocks is checked:
  - a relative target (to the file's folder; a leading / to ROOT) must be an
    existing file or folder;
  - a #anchor (alone: the same file; after a .md target, or a folder whose
    README.md it opens: that file) must be a heading of that file by GitHub's
    slug rules (inline markup stripped, lowercased, punctuation other than -
    and _ removed, each space a -, a repeated slug followed by -1, -2, ...),
    or an HTML id / name in it.
External targets (http:, https:, mailto: or any other scheme) are not
checked. Prints each broken link as FILE:LINE: target — reason and exits 1,
or prints a summary and exits 0."""
import os
import re
import subprocess
import sys
import urllib.parse

SKIP_DIRS = ("node_modules", "build")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ID = re.compile(r"<[a-zA-Z][^>]*?\s(?:id|name)\s*=\s*[\"']([^\"']+)[\"']")
HTML_LINK = re.compile(r"<[a-zA-Z][^>]*?\s(?:href|src)\s*=\s*[\"']([^\"']+)[\"']")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(root):
    """Paths (relative to root, '/'-separated) of the Markdown files to check."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                              "--exclude-standard", "-z", "--", "*.md"],
                             capture_output=True, check=True).stdout.decode()
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for top, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS]
            names += [os.path.relpath(os.path.join(top, f), root).replace(os.sep, "/")
                      for f in files if f.endswith(".md")]
    keep = []
    for n in sorted(set(names)):
        if any(p in SKIP_DIRS for p in n.split("/")[:-1]):
            continue
        if os.path.isfile(os.path.join(root, n)):  # listed but deleted in the work tree
            keep.append(n)
    return keep


def prose_lines(text):
    """(line number, line) of the lines outside fenced and indented code blocks."""
    fence = None
    prev_blank = True
    for no, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            prev_blank = False
            continue
        if m:
            fence = m.group(1)
            continue
        if prev_blank and line.startswith(("    ", "\t")) and line.strip():
            continue  # an indented code block (it starts after a blank line)
        prev_blank = not line.strip()
        yield no, line


def strip_code_spans(line):
    """The line with its code spans blanked (their links are not links)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "`":
            j = i
            while j < len(line) and line[j] == "`":
                j += 1
            ticks = line[i:j]
            end = line.find(ticks, j)
            while end != -1 and end + len(ticks) < len(line) and line[end + len(ticks)] == "`":
                end = line.find(ticks, end + len(ticks) + 1)
            if end == -1:
                out.append(ticks)
                i = j
                continue
            out.append(" " * (end + len(ticks) - i))
            i = end + len(ticks)
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def slug(heading):
    """GitHub's anchor for a heading's text (before duplicates are numbered)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)                          # HTML tags
    text = text.replace("`", "")
    text = re.sub(r"(\*+)(\S(?:.*?\S)?)\1", r"\2", text)          # *emphasis*, **strong**
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    """The anchors a Markdown text defines: its headings' slugs and HTML ids."""
    seen = {}
    out = set()

    def add(s):
        n = seen.get(s)
        if n is None:
            seen[s] = 0
            out.add(s)
        else:
            while True:
                n += 1
                cand = "%s-%d" % (s, n)
                if cand not in seen:
                    break
            seen[s] = n
            seen[cand] = 0
            out.add(cand)

    prev = None
    for _, line in prose_lines(text):
        for name in HTML_ID.findall(line):
            out.add(name)
        m = ATX.match(line)
        if m:
            add(slug(m.group(2) or ""))
            prev = None
            continue
        m = SETEXT.match(line)
        if m and prev and prev.strip() and not prev.lstrip().startswith(("|", ">", "-", "*", "+")):
            add(slug(prev.strip()))
            prev = None
            continue
        prev = line
    return out


def link_targets(line):
    """The link targets on one prose line."""
    line = strip_code_spans(line)
    out = []
    m = REF_DEF.match(line)
    if m:
        out.append(m.group(1))
    i = 0
    while True:
        i = line.find("](", i)
        if i == -1:
            break
        j, depth = i + 2, 1
        while j < len(line) and depth:
            depth += {"(": 1, ")": -1}.get(line[j], 0)
            j += 1
        inner = line[i + 2:j - 1].strip() if not depth else None
        if inner:
            if inner.startswith("<"):
                out.append(inner[1:inner.find(">")] if ">" in inner else inner[1:])
            else:
                out.append(inner.split()[0])
        i = j
    out += HTML_LINK.findall(line)
    return out


def check(root):
    files = markdown_files(root)
    cache = {}

    def anchors_of(path):
        if path not in cache:
            with open(path, encoding="utf-8", errors="replace") as f:
                cache[path] = anchors(f.read())
        return cache[path]

    broken, links = [], 0
    for rel in files:
        path = os.path.join(root, rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for no, line in prose_lines(text):
            for target in link_targets(line):
                if SCHEME.match(target) or not target:
                    continue
                links += 1
                where, _, frag = target.partition("#")
                where = urllib.parse.unquote(where)
                frag = urllib.parse.unquote(frag)
                if where:
                    dest = os.path.normpath(os.path.join(root, where.lstrip("/")) if where.startswith("/")
                                            else os.path.join(os.path.dirname(path), where))
                    if not os.path.exists(dest):
                        broken.append("%s:%d: %s — no such file or folder" % (rel, no, target))
                        continue
                else:
                    dest = path
                if not frag:
                    continue
                if os.path.isdir(dest):
                    dest = os.path.join(dest, "README.md")
                    if not os.path.isfile(dest):
                        broken.append("%s:%d: %s — an anchor into a folder without README.md" % (rel, no, target))
                        continue
                if not dest.endswith(".md"):
                    continue  # anchors into other files (source lines) are not headings
                if frag not in anchors_of(dest):
                    broken.append("%s:%d: %s — no heading #%s in %s" %
                                  (rel, no, target, frag, os.path.relpath(dest, root)))
    return files, links, broken


def main(argv):
    if len(argv) != 2:
        print("usage: check_links.py ROOT", file=sys.stderr)
        return 2
    files, links, broken = check(argv[1])
    for b in broken:
        print(b)
    if broken:
        print("%d broken link(s) in %d Markdown files" % (len(broken), len(files)))
        return 1
    print("%d relative links in %d Markdown files resolve" % (links, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
