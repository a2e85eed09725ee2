"""The benchmark datasets, fetched from their publishers into the layout params.yaml reads (``../shared/data``).

``make data`` (``python -m kgrag.kg.fetch``, ``kgrag data``) walks :data:`DATASETS`, the manifest: for each final
file, where its publisher ships it, how it becomes the file kgrag reads (byte for byte, or a documented
conversion) and the sha256 of the result. A file already there with the right sha256 is only checked, so on a
machine that has the data nothing is downloaded and no network is touched. Otherwise the file is downloaded to
a temporary file beside its destination, converted if it must be, hashed, and renamed into place only when
the hash matches: a mismatch or a cut download leaves nothing behind and says which file, both hashes and the
fix.

Where the bytes come from, in this order:

- ``--from PATH`` (repeatable): local downloads, a folder or a ``.zip``, holding the publisher's release with
  its own paths (a clone of zmtkeke/IRN, the MetaQA Google Drive folder as downloaded, ...), at the top or
  under one folder (``MetaQA/kb.txt``);
- ``--mirror URL-or-DIR`` (or ``$KGRAG_DATA_MIRROR``): a copy laid out as ``<release>/<path in the release>``
  (``irn/data/WC2014/WC2014.txt``), over HTTP(S) or as a local folder; the tests serve one on 127.0.0.1;
- the publisher's own URL. MetaQA has none that a plain HTTP client can read (a Google Drive folder): the
  error says how to download it by hand and pass it with ``--from``.

Standard library only (it runs before the environment is set up); the foundation of nothing, imported by the
CLI only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

DEFAULT_INTO = Path("../shared/data")
MIRROR_ENV = "KGRAG_DATA_MIRROR"
TIMEOUT_S = 60
CHUNK = 1 << 20


class FetchError(Exception):
    """A file that could not be fetched or did not verify: the message is a few lines (what, where, the fix)."""


class Unreachable(FetchError):
    """No source to read a release from (no URL, or the network is down): the release's other files are not
    tried, and the error is given once for all of them."""


@dataclass(frozen=True)
class Release:
    """A publisher's release: where its files are, under which licence, and what to cite."""

    key: str  # its folder in a mirror: <mirror>/<key>/<path>
    title: str
    base_url: str | None  # the release's root URL; a file's URL is base_url + its path (None: no plain download)
    homepage: str
    licence: str
    citation: str
    manual: str = ""  # how to get it by hand, where base_url is None


@dataclass(frozen=True)
class File:
    """One file kgrag reads: ``dest`` under ``--into``, from ``path`` in its release, ``sha256`` of the result."""

    dest: str
    path: str
    sha256: str
    convert: str | None = None  # a name in CONVERSIONS; None: the publisher's bytes as they are


@dataclass(frozen=True)
class Dataset:
    name: str
    release: Release
    files: tuple[File, ...]


def metaqa_kb(src: Path, out: Path) -> None:
    """MetaQA's ``kb.txt`` as kgrag reads it: every distinct triple once, sorted by (subject, relation, object)
    in code-point order, written ``subject|relation|object`` with ``\\n`` line ends.

    Reads the publisher's ``kb.txt`` (``subject|relation|object``, 134,741 lines with repeats) or the same KB
    in EmbedKGQA's MetaQA_full form (``train.txt``: tab-separated, repeats removed): both give the same file."""
    triples = set()
    with open(src, encoding="utf-8", newline="") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            parts = line.split("\t") if "\t" in line else line.split("|")
            if len(parts) != 3:
                raise FetchError(f"{src.name} line {n}: {len(parts)} fields, expected subject|relation|object "
                                 f"(or tab-separated): is this MetaQA's kb.txt?")
            triples.add((parts[0], parts[1], parts[2]))
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for s, r, o in sorted(triples):
            f.write(f"{s}|{r}|{o}\n")


#: conversions from a publisher's form to the file kgrag reads (name -> function(source path, output path))
CONVERSIONS: dict[str, Callable[[Path, Path], None]] = {"metaqa_kb": metaqa_kb}

# --- the manifest --------------------------------------------------------------------------------------------

METAQA = Release(
    key="metaqa",
    title="MetaQA (MoviE Text Audio QA), vanilla text questions and the movie KB",
    base_url=None,
    homepage="https://github.com/yuyuz/MetaQA",
    licence="CC BY 3.0 (Creative Commons Attribution 3.0 Unported; LICENSE.txt of yuyuz/MetaQA)",
    citation="Zhang, Dai, Kozareva, Smola and Song, Variational Reasoning for Question Answering with Knowledge "
             "Graph, AAAI 2018 (arXiv:1709.04071)",
    manual="MetaQA is published as a Google Drive folder, which no plain HTTP client can download: open "
           "https://drive.google.com/drive/folders/0B-36Uca2AvwhTWVFSUZqRXVtbUE (the link of "
           "github.com/yuyuz/MetaQA), download kb.txt and the 1-hop, 2-hop and 3-hop folders (the whole folder "
           "as a .zip will do), then run `make data FROM=<that folder or .zip>`",
)
EXPLAGRAPHS = Release(
    key="explagraphs",
    title="ExplaGraphs (explanation graphs for stance prediction)",
    # HEAD: the default branch; the content is pinned by the sha256 of each file
    base_url="https://raw.githubusercontent.com/swarnaHub/ExplaGraphs/HEAD/",
    homepage="https://github.com/swarnaHub/ExplaGraphs (https://explagraphs.github.io/)",
    licence="MIT (LICENSE of swarnaHub/ExplaGraphs, copied beside the data)",
    citation="Saha, Yadav, Bauer and Bansal, ExplaGraphs: An Explanation Graph Generation Task for Structured "
             "Commonsense Reasoning, EMNLP 2021 (arXiv:2104.07644)",
)
IRN = Release(
    key="irn",
    title="IRN release: WorldCup2014 and PathQuestion-Large",
    # the commit whose files these are (read back from it: same length and ends as the files kgrag uses)
    base_url="https://raw.githubusercontent.com/zmtkeke/IRN/5cafccd3de81e901fe4892a7aa141040d9eebed3/",
    homepage="https://github.com/zmtkeke/IRN",
    licence="none stated (the repository ships no licence file): research data released with the paper; "
            "cite it and ask the authors before redistributing",
    citation="Zhou, Huang and Zhu, An Interpretable Reasoning Network for Multi-Relation Question Answering, "
             "COLING 2018",
)


def _metaqa_files() -> tuple[File, ...]:
    sha = {  # of the files in ../shared/data/metaqa
        "qa_1hop_dev.txt": "3c68fa73a14d9b9616e49f08e2d8b65e024af417708306874fe4d398634620d3",
        "qa_1hop_test.txt": "c57e9c2c4c05e5eec4503460042c09bfa3e80ea1a5ecaf361c92dd81d6c7bece",
        "qa_1hop_test_qtype.txt": "6390ded9d7b7e56f95af96429b38e98ee14c5a617963dc69f396c8cc4f6ff64d",
        "qa_2hop_dev.txt": "a713ae6b4a7cdccfdda57ac99092f4114a1f8b0c4ba51b4466a15496a4ff6fbd",
        "qa_2hop_test.txt": "b1c4f1ad77f34a27e0e5a13c08b436c6f4c9a49dccd8d43639a569ee5cd906a1",
        "qa_2hop_test_qtype.txt": "660b87183f3d21f3f64eaa5bcd12036124662e518a3958b5c47389a11e980210",
        "qa_3hop_dev.txt": "c638b99f97db93112f7a9ceec47675066cc9efc93b7ecd43e22c54ab531741d9",
        "qa_3hop_test.txt": "f4c2a801f864e80e809655a20b4b8c9904f4a2885a7f23850b2fabd8d38a6540",
        "qa_3hop_test_qtype.txt": "08dce72050b7d1e6271772b5d0066e2b14a00d6c64062a7d24d1f580e94f0e93",
    }
    files = [File("metaqa/kb.txt", "kb.txt", "009490431c3b9b741f6416feffb062df9fcda6fa1869a52dcf490cfaf7c9c832",
                  convert="metaqa_kb")]
    for h in (1, 2, 3):
        for split in ("dev", "test"):
            files.append(File(f"metaqa/qa_{h}hop_{split}.txt", f"{h}-hop/vanilla/qa_{split}.txt",
                              sha[f"qa_{h}hop_{split}.txt"]))
        files.append(File(f"metaqa/qa_{h}hop_test_qtype.txt", f"{h}-hop/qa_test_qtype.txt",
                          sha[f"qa_{h}hop_test_qtype.txt"]))
    return tuple(files)


DATASETS: tuple[Dataset, ...] = (
    Dataset("metaqa", METAQA, _metaqa_files()),
    Dataset("explagraphs", EXPLAGRAPHS, (
        File("explagraphs/train.tsv", "data/train.tsv",
             "83eb96f38b1d91d0299924f6050c3ec173a7c5c5a7a3921908cc7fd46d27bba3"),
        File("explagraphs/dev.tsv", "data/dev.tsv", "1b7e069501cf6f2d7f5d98fe6f0950ee8bd9a0f1986054ecb23873854993745a"),
        File("explagraphs/relations.txt", "data/relations.txt",
             "fa067901224e660573cb67ea691a96d3d21e20440f1f94ae26341ae645ab799d"),
        File("explagraphs/LICENSE", "LICENSE", "e958b7182bc22a56785f6832c024087227c51771f77783ce47607f43d333c4b8"),
    )),
    Dataset("wc2014", IRN, (
        File("transfer/wc2014/WC2014.txt", "data/WC2014/WC2014.txt",
             "e1c8233e4c3f198497cb752c47e631ef834ae3ff2f7eff2b7779ba035750a489"),
        File("transfer/wc2014/WC-P2.txt", "data/WC2014/WC-P2.txt",
             "ad8068f723f90780ecd1d1135a94d9066ed8aa0fb48b18522eaf7f63fdcb6872"),
        File("transfer/wc2014/WC-C.txt", "WC2014/WC-C.txt",
             "88739b89bbec881b539d95fb80f8dc824504ebcdc7983263663c545314cb892c"),
    )),
    Dataset("pathquestion_large", IRN, (
        # the KBs are the release's data/PQL/exact_2mkb*.txt, which PathQuestion/readme.txt calls PQL2-KB / PQL3-KB
        File("transfer/pathquestion_large/PQL2-KB.txt", "data/PQL/exact_2mkb.txt",
             "33962cedf418d2e02382a88496b0fd4b3f567ce07418e6cbb7a7dc830a0fcb7a"),
        File("transfer/pathquestion_large/PQL-2H.txt", "PathQuestion/PQL-2H.txt",
             "b9d5d35905d7f5515a342707099d1fefb9eb8add9ef7811f8d04a02f66d1e89e"),
        File("transfer/pathquestion_large/PQL3-KB.txt", "data/PQL/exact_2mkb3.txt",
             "b176494c0064a87fdca16c79e1e210a70d22f5ea31d11bdf942d11c65065b775"),
        File("transfer/pathquestion_large/PQL-3H.txt", "PathQuestion/PQL-3H.txt",
             "e13455078bd808601893de860e2c99a61e476da2c8814ed79373e6a97782083d"),
    )),
)

# --- fetching ------------------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def mirror_url(mirror: str, release: Release, f: File) -> str:
    """The file's URL in a mirror (``<mirror>/<release key>/<path>``); a local folder becomes a file:// URL."""
    if "://" not in mirror:
        mirror = Path(mirror).resolve().as_uri()
    return f"{mirror.rstrip('/')}/{release.key}/{urllib.parse.quote(f.path)}"


def publisher_url(release: Release, f: File) -> str | None:
    return None if release.base_url is None else release.base_url + urllib.parse.quote(f.path)


def _local(sources: Iterable[Path], release: Release, f: File) -> tuple[Path, str | None] | None:
    """(folder or zip, member) holding the file in a ``--from`` source: its path at the top, under the release's
    key, or under one folder; None if no source has it."""
    for src in sources:
        if zipfile.is_zipfile(src):
            with zipfile.ZipFile(src) as z:
                names = [n for n in z.namelist() if not n.endswith("/")]
            for n in sorted(names, key=len):
                if n == f.path or n.split("/", 1)[-1] == f.path:
                    return src, n
        elif src.is_dir():
            cands = [src / f.path, src / release.key / f.path] + [d / f.path for d in sorted(src.iterdir())
                                                                   if d.is_dir()]
            for c in cands:
                if c.is_file():
                    return c, None
    return None


def _download(url: str, out: Path) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "kgrag-fetch"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r, open(out, "wb") as w:
            shutil.copyfileobj(r, w, CHUNK)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise Unreachable(f"could not download {url} ({reason})\n  fix: check the network, or fetch from a copy: "
                          f"--mirror URL-or-DIR (${MIRROR_ENV}) or --from a local download") from None


def fetch_file(into: Path, ds: Dataset, f: File, *, mirror: str | None = None,
               sources: Iterable[Path] = ()) -> str:
    """Put ``f`` at ``into/f.dest`` and return what was done (``present``, or where it came from). Raises
    :class:`FetchError` with the fix; on any failure nothing new is left at the destination."""
    dest = into / f.dest
    if dest.exists():
        got = sha256_file(dest)
        if got == f.sha256:
            return "present"
        raise FetchError(f"{dest}: present but not the file of the manifest\n  expected sha256 {f.sha256}\n"
                         f"  got      sha256 {got}\n  fix: move it away (it is not the published file) and run "
                         f"`make data` again")
    local = _local(sources, ds.release, f)
    url = None if local else (mirror_url(mirror, ds.release, f) if mirror else publisher_url(ds.release, f))
    if local is None and url is None:
        raise Unreachable(f"{ds.release.key} has no plain download URL\n  fix: {ds.release.manual}")
    where = (f"{local[0]}" + (f" ({local[1]})" if local[1] else "")) if local else url
    made = [p for p in reversed(dest.parents) if not p.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    raw = tmp.with_suffix(".raw") if f.convert else tmp
    try:
        if local and local[1] is not None:
            with zipfile.ZipFile(local[0]) as z, z.open(local[1]) as r, open(raw, "wb") as w:
                shutil.copyfileobj(r, w, CHUNK)
        elif local:
            shutil.copyfile(local[0], raw)
        else:
            _download(url, raw)
        if f.convert:
            CONVERSIONS[f.convert](raw, tmp)
        got = sha256_file(tmp)
        if got != f.sha256:
            how = f", then {f.convert}" if f.convert else ""
            raise FetchError(f"{dest}: sha256 mismatch, nothing written\n  from {where}{how}\n"
                             f"  expected sha256 {f.sha256}\n  got      sha256 {got}\n  fix: run `make data` "
                             f"again (a cut download); if it stays, the source is not the published file: use "
                             f"another copy (--from, --mirror) or, if the publisher changed it, review the change "
                             f"and update the manifest in kgrag/kg/fetch.py")
        os.replace(tmp, dest)
    except BaseException:
        for p in (tmp, raw):
            p.unlink(missing_ok=True)
        for d in reversed(made):  # folders made for this file, now empty
            try:
                d.rmdir()
            except OSError:
                break
        raise
    finally:
        if raw != tmp:
            raw.unlink(missing_ok=True)
    return f"fetched from {where}"


def select(names: Iterable[str] = (), datasets: tuple[Dataset, ...] = DATASETS) -> tuple[Dataset, ...]:
    names = list(names)
    unknown = [n for n in names if n not in {d.name for d in datasets}]
    if unknown:
        raise FetchError(f"unknown dataset(s) {', '.join(unknown)}; known: {', '.join(d.name for d in datasets)}")
    return tuple(d for d in datasets if not names or d.name in names)


def fetch(into: Path, datasets: tuple[Dataset, ...] = DATASETS, *, mirror: str | None = None,
          sources: Iterable[Path] = (), log: Callable[[str], None] = print) -> list[str]:
    """Fetch every file of ``datasets`` into ``into``; returns the errors (each a few lines), [] when all are
    in place. A file that fails does not stop the others; a release that cannot be reached is tried once."""
    sources = [Path(s) for s in sources]
    errors, present, failed = [], 0, 0
    for ds in datasets:
        unreachable, missed = None, []
        for f in ds.files:
            if unreachable is not None:  # only check what is there: the source is known to be out of reach
                p = into / f.dest
                if p.exists() and sha256_file(p) == f.sha256:
                    present += 1
                else:
                    missed.append(f.dest)
                continue
            try:
                done = fetch_file(into, ds, f, mirror=mirror, sources=sources)
            except Unreachable as e:
                unreachable, missed = e, [f.dest]
                continue
            except FetchError as e:
                errors.append(f"error: {e}")
                failed += 1
                continue
            if done == "present":
                present += 1
            else:
                log(f"{f.dest}: {done} (sha256 ok)")
        if unreachable is not None:
            failed += len(missed)
            errors.append(f"error: {ds.name}: {len(missed)} file(s) not fetched ({', '.join(missed[:3])}"
                          f"{', ...' if len(missed) > 3 else ''}): {unreachable}")
    total = sum(len(ds.files) for ds in datasets)
    log(f"data: {total - failed} of {total} files in place in {into} (sha256 checked; {present} were there "
        f"already)")
    return errors


def check(into: Path, datasets: tuple[Dataset, ...] = DATASETS) -> list[str]:
    """The files of ``datasets`` that are missing or differ (no network)."""
    bad = []
    for ds in datasets:
        for f in ds.files:
            p = into / f.dest
            if not p.exists():
                bad.append(f"{p}: missing")
            elif sha256_file(p) != f.sha256:
                bad.append(f"{p}: sha256 differs from the manifest")
    return bad


def describe(datasets: tuple[Dataset, ...] = DATASETS) -> str:
    lines = []
    for ds in datasets:
        r = ds.release
        lines.append(f"{ds.name}: {r.title}\n  licence: {r.licence}\n  cite: {r.citation}\n  home: {r.homepage}")
        for f in ds.files:
            src = publisher_url(r, f) or f"{r.key}:{f.path} (by hand)"
            lines.append(f"  {f.dest}  <- {src}" + (f"  [{f.convert}]" if f.convert else "") + f"  {f.sha256}")
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("datasets", nargs="*", metavar="DATASET",
                    help=f"datasets to fetch (default: all: {', '.join(d.name for d in DATASETS)})")
    ap.add_argument("--into", type=Path, default=DEFAULT_INTO,
                    help=f"the data folder params.yaml reads (default: {DEFAULT_INTO})")
    ap.add_argument("--mirror", default=os.environ.get(MIRROR_ENV) or None, metavar="URL|DIR",
                    help=f"fetch from a copy laid out as <release>/<path> instead of the publishers (default: "
                         f"${MIRROR_ENV})")
    ap.add_argument("--from", dest="sources", action="append", default=[], type=Path, metavar="PATH",
                    help="a local download (folder or .zip) of a publisher's release, e.g. the MetaQA Google "
                         "Drive folder (repeatable)")
    ap.add_argument("--check", action="store_true", help="only check the files' sha256 (no network); exit 1 if "
                    "one is missing or differs")
    ap.add_argument("--list", action="store_true", help="print the manifest: sources, licences, sha256")


def run(args: argparse.Namespace) -> int:
    try:
        datasets = select(args.datasets)
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        print(describe(datasets))
        return 0
    gone = [str(s) for s in args.sources if not Path(s).exists()]
    if gone:
        print(f"error: --from {', '.join(gone)}: no such file or folder", file=sys.stderr)
        return 2
    if args.check:
        bad = check(args.into, datasets)
        for b in bad:
            print(b, file=sys.stderr)
        if not bad:
            print(f"data: all {sum(len(d.files) for d in datasets)} files in {args.into} match the manifest")
        return 1 if bad else 0
    errors = fetch(args.into, datasets, mirror=args.mirror, sources=args.sources)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kgrag.kg.fetch", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
