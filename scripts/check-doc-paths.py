#!/usr/bin/env python3
"""Every path and code item the docs cite exists.

    python3 scripts/check-doc-paths.py

Reads the project's own docs (README.md, the crates' READMEs, docs/*.md,
BENCHMARKS.md, docs/benchmarks/README.md; not the dated dumps under
docs/benchmarks/, which describe the tree of their day) and checks, in each `code span` and relative link:

- a path (`src/lease/claim.rs`, `migrations/`, `docs/benchmarks/*/`, with
  an optional `:line`) exists, from the repository's root, from the doc's
  own folder, or from one of the folders docs abbreviate (`SHORT_BASES`:
  `runtime/state/` is `src/runtime/state/`); a glob matches something;
- a bare file name (`batch.rs`, `metrics.rs`, `0005_fence_tenure.sql`),
  as docs write beside a folder they already named, is the name of some
  file of the repository (`git ls-files`);
- a Rust item path (`scheduler::cost::fifty_thousand_keys_…`,
  `LeaseStore::claim_due`, `runtime::state::registry::tests::*`) names an
  identifier that some Rust source of the workspace defines or uses: its
  last segment (the one before a `*`) is a word of some `.rs` file.

Prints each citation that does not resolve, with its doc and line, and
exits 1 if there is any.
"""

import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DOCS = ["README.md", "BENCHMARKS.md", "cli/README.md", "model/README.md", "grafana/README.md"]
DOCS += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
# The benchmarks' index (not the dated dumps it indexes).
DOCS += ["docs/benchmarks/README.md"]

SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
EXTENSIONS = "rs|sql|md|toml|sh|py|json|yml|yaml|js|css|png|txt|ini|html"
PATH = re.compile(r"^(?:\.{0,2}/)?[\w.\-*]+(?:/[\w.\-*]+)*(?:\.(?:%s)|/)(?::\d+(?:-\d+)?)?$" % EXTENSIONS)
ITEM = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*::)+(?:[A-Za-z_][A-Za-z0-9_]*|\*)(?:\(\))?$")
# Spans that look like paths but name things outside the tree: system
# files, crates' and other projects' sources, things a run creates.
OUTSIDE = re.compile(
    r"^(/|~|\$|target/|\.\./shared/|/usr/|/proc/|/etc/|/tmp/|examples/chaos/.*\.events$)"
    r"|(^|/)(node_modules|\.cargo|\.git)/"
)
# Folders the docs name paths under without repeating them (the layer
# table's `batch/` is `src/lease/batch/`; a test module `scheduler/` is
# under `tests/it/`).
SHORT_BASES = ["src", "src/lease", "src/runtime", "src/console", "tests/it", "cli"]
# Item paths of other crates and of the standard library.
FOREIGN = re.compile(
    r"^(std|core|alloc|sqlx|tokio|tokio_util|tower|axum|hyper|hyper_util|metrics|metrics_exporter_prometheus|"
    r"tracing|tracing_subscriber|opentelemetry|serde|serde_json|chrono|chrono_tz|clap|maud|stateright|"
    r"futures|thiserror|fantoccini|rustls|http|uuid|unicode_width|riverqueue|anyhow)::"
)


def rust_words():
    words = set()
    for base in ["src", "cli", "macros", "rules", "testkit", "tests", "model", "examples", "benches"]:
        for path in glob.glob(os.path.join(ROOT, base, "**", "*.rs"), recursive=True):
            if "/target/" in path:
                continue
            with open(path, encoding="utf-8") as f:
                words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.read()))
    return words


def tracked_names():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {os.path.basename(p) for p in out.splitlines()}


# Files a run writes, named bare (the chaos harness's output directory).
RUN_OUTPUTS = {"verdict.md"}
BARE = re.compile(r"^[\w.\-]+\.(?:%s)(?::\d+(?:-\d+)?)?$" % EXTENSIONS)


def path_exists(doc_dir, cited):
    cited = re.sub(r":\d+(?:-\d+)?$", "", cited)
    for base in [ROOT, os.path.join(ROOT, doc_dir)] + [os.path.join(ROOT, b) for b in SHORT_BASES]:
        full = os.path.normpath(os.path.join(base, cited))
        if any(c in cited for c in "*?["):
            if glob.glob(full):
                return True
        elif os.path.exists(full):
            return True
    return False


def main():
    words = rust_words()
    names = tracked_names()
    missing = []
    for doc in DOCS:
        full = os.path.join(ROOT, doc)
        if not os.path.exists(full):
            missing.append((doc, 0, doc, "the doc itself"))
            continue
        doc_dir = os.path.dirname(doc)
        in_code_block = False
        with open(full, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.lstrip().startswith("```"):
                    in_code_block = not in_code_block
                    continue
                if in_code_block:
                    continue
                for link in LINK.findall(line):
                    target = link.split("#", 1)[0]
                    if not target or re.match(r"^[a-z]+:", target):
                        continue
                    if not path_exists(doc_dir, target):
                        missing.append((doc, n, target, "link"))
                for span in SPAN.findall(line):
                    span = span.strip()
                    in_file = re.match(r"^([\w.\-/]+\.rs)::(.+)$", span)
                    if in_file:
                        file, item = in_file.groups()
                        if not path_exists(doc_dir, file):
                            missing.append((doc, n, span, "path"))
                        elif item.split("::")[-1] not in words:
                            missing.append((doc, n, span, "item"))
                    elif PATH.match(span) and "/" in span and not OUTSIDE.search(span):
                        if not path_exists(doc_dir, span):
                            missing.append((doc, n, span, "path"))
                    elif BARE.match(span) and span not in RUN_OUTPUTS and not any(c in span for c in "*?["):
                        if re.sub(r":\d+(?:-\d+)?$", "", span) not in names and not path_exists(doc_dir, span):
                            missing.append((doc, n, span, "file"))
                    elif ITEM.match(span) and not FOREIGN.match(span):
                        segments = [s for s in span.rstrip("()").split("::") if s != "*"]
                        if segments[-1] not in words:
                            missing.append((doc, n, span, "item"))
    for doc, n, cited, kind in missing:
        print(f"{doc}:{n}: {kind} `{cited}` does not exist")
    checked = len(DOCS)
    if missing:
        print(f"{len(missing)} citation(s) in {checked} docs do not resolve")
        return 1
    print(f"every path and item cited in {checked} docs exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
