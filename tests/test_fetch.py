"""`make data` (kgrag.kg.fetch): datasets fetched over HTTP from a real local server (127.0.0.1, port 0) serving
fixture files made here, verified by sha256, skipped when present, refused with a clear error and nothing left
behind on a mismatch; MetaQA's kb.txt conversion and a .zip download. No test touches the network: every
fetch goes to the local server or a local folder."""

from __future__ import annotations

import hashlib
import http.server
import random
import threading
import zipfile
from functools import partial
from pathlib import Path

import pytest

from kgrag.kg import fetch as F
from tests.conftest import ROOT, SHARED, need


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet; the requests are recorded instead
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """(root folder served, base URL, list of request paths): a real HTTP server on 127.0.0.1."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
    httpd.requests = []
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}", httpd.requests
    finally:
        httpd.shutdown()
        httpd.server_close()


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


KB = "Kismet|directed_by|William Dieterle\nKismet|release_year|1944\nKismet|directed_by|William Dieterle\n" \
     "$|has_tags|bd-r\n$9.99|directed_by|Tatia Rosenthal\n"
#: the converted kb: repeats dropped, sorted by (subject, relation, object): "$" before "$9.99"
KB_OUT = "$|has_tags|bd-r\n$9.99|directed_by|Tatia Rosenthal\nKismet|directed_by|William Dieterle\n" \
         "Kismet|release_year|1944\n"
QA = "what films did [Kismet] star\tA|B\n"
TSV = "belief\targument\tsupport\t(a; is a; b)\n"


def toy(base_url: str | None) -> tuple[F.Dataset, ...]:
    """A small manifest in the real one's shape: a byte-for-byte release served at ``base_url`` and a MetaQA-like
    one with no URL whose kb is converted."""
    pub = F.Release("toy", "Toy release", base_url and base_url + "/pub/", "home", "MIT", "Someone 2024")
    meta = F.Release("toyqa", "Toy MetaQA", None, "home", "CC BY 3.0", "Someone 2018",
                     manual="download it by hand from the Drive folder, then `make data FROM=...`")
    return (
        F.Dataset("toy", pub, (F.File("toy/train.tsv", "data/train.tsv", sha(TSV.encode())),
                               F.File("toy/sub/LICENSE", "LICENSE", sha(b"MIT License\n")))),
        F.Dataset("toyqa", meta, (F.File("toyqa/kb.txt", "kb.txt", sha(KB_OUT.encode()), convert="metaqa_kb"),
                                  F.File("toyqa/qa_1hop_dev.txt", "1-hop/vanilla/qa_dev.txt", sha(QA.encode())))),
    )


def publish(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8", newline="")


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_fetch_verifies_and_places_each_file_then_skips_present_ones_without_a_request(server, tmp_path):
    root, url, requests = server
    publish(root, {"pub/data/train.tsv": TSV, "pub/LICENSE": "MIT License\n"})
    into, logs = tmp_path / "data", []
    assert F.fetch(into, toy(url)[:1], log=logs.append) == []
    assert (into / "toy/train.tsv").read_text() == TSV and (into / "toy/sub/LICENSE").read_text() == "MIT License\n"
    assert requests == ["/pub/data/train.tsv", "/pub/LICENSE"]
    assert leftovers(into) == ["toy", "toy/sub", "toy/sub/LICENSE", "toy/train.tsv"]  # no temporary file
    assert any(f"fetched from {url}/pub/data/train.tsv" in line for line in logs)
    # second run: everything present with the right sha256, so no request at all
    logs.clear()
    assert F.fetch(into, toy(url)[:1], log=logs.append) == []
    assert len(requests) == 2
    assert logs == [f"data: 2 of 2 files in place in {into} (sha256 checked; 2 were there already)"]


def test_a_mismatch_names_file_hashes_and_fix_and_leaves_nothing_behind(server, tmp_path):
    root, url, _ = server
    publish(root, {"pub/data/train.tsv": TSV.replace("support", "counter"), "pub/LICENSE": "MIT License\n"})
    into = tmp_path / "data"
    errors = F.fetch(into, toy(url)[:1], log=lambda _: None)
    assert len(errors) == 1
    err = errors[0]
    assert f"{into / 'toy/train.tsv'}: sha256 mismatch, nothing written" in err
    assert f"from {url}/pub/data/train.tsv" in err
    assert f"expected sha256 {sha(TSV.encode())}" in err
    assert f"got      sha256 {sha(TSV.replace('support', 'counter').encode())}" in err
    assert "fix: run `make data` again" in err and "kgrag/kg/fetch.py" in err
    assert len(err.splitlines()) == 5 and "counter" not in err  # a few lines, never the data
    # the other file of the release still came; the bad one left no file, no .part, no folder of its own
    assert leftovers(into) == ["toy", "toy/sub", "toy/sub/LICENSE"]


def test_a_mismatch_in_a_new_folder_removes_the_folder_it_made(server, tmp_path):
    root, url, _ = server
    publish(root, {"pub/LICENSE": "not MIT\n"})
    into = tmp_path / "data"
    errors = F.fetch(into, (F.Dataset("toy", toy(url)[0].release, toy(url)[0].files[1:]),), log=lambda _: None)
    assert len(errors) == 1 and "toy/sub/LICENSE: sha256 mismatch" in errors[0]
    assert not into.exists()


def test_a_present_file_that_differs_is_left_alone_and_reported(server, tmp_path):
    root, url, requests = server
    into = tmp_path / "data"
    publish(into, {"toy/train.tsv": "edited by hand\n", "toy/sub/LICENSE": "MIT License\n"})
    errors = F.fetch(into, toy(url)[:1], log=lambda _: None)
    assert len(errors) == 1 and "present but not the file of the manifest" in errors[0]
    assert "fix: move it away" in errors[0]
    assert (into / "toy/train.tsv").read_text() == "edited by hand\n" and requests == []


def test_http_errors_and_an_unreachable_server_are_said_once_per_dataset(server, tmp_path):
    _, url, requests = server
    errors = F.fetch(tmp_path / "data", toy(url)[:1], log=lambda _: None)  # nothing published: 404s
    assert len(errors) == 2 and all("HTTP 404" in e for e in errors)
    # a closed port: the first file fails, the rest of the dataset is not tried, one error names them all
    errors = F.fetch(tmp_path / "data", toy("http://127.0.0.1:9")[:1], log=lambda _: None)
    assert len(errors) == 1
    assert errors[0].startswith("error: toy: 2 file(s) not fetched (toy/train.tsv, toy/sub/LICENSE)")
    assert "fix: check the network, or fetch from a copy: --mirror" in errors[0]
    assert not (tmp_path / "data").exists()


def test_a_release_without_url_says_how_to_get_it_and_converts_the_kb_from_a_mirror(server, tmp_path):
    root, url, requests = server
    into = tmp_path / "data"
    errors = F.fetch(into, toy(None)[1:], log=lambda _: None)
    assert len(errors) == 1 and "toyqa: 2 file(s) not fetched" in errors[0]
    assert "fix: download it by hand from the Drive folder" in errors[0]
    # a mirror: <mirror>/<release key>/<path in the release>; the kb is deduplicated and sorted on the way
    publish(root, {"mirror/toyqa/kb.txt": KB, "mirror/toyqa/1-hop/vanilla/qa_dev.txt": QA})
    assert F.fetch(into, toy(None)[1:], mirror=f"{url}/mirror", log=lambda _: None) == []
    assert (into / "toyqa/kb.txt").read_text() == KB_OUT and (into / "toyqa/qa_1hop_dev.txt").read_text() == QA
    assert requests == ["/mirror/toyqa/kb.txt", "/mirror/toyqa/1-hop/vanilla/qa_dev.txt"]
    assert leftovers(into / "toyqa") == ["kb.txt", "qa_1hop_dev.txt"]  # the raw download is gone too


def test_a_local_zip_of_the_release_is_read_under_its_top_folder(tmp_path):
    """The MetaQA Google Drive folder comes as a .zip with one top folder (``MetaQA/kb.txt``)."""
    z = tmp_path / "MetaQA-001.zip"
    with zipfile.ZipFile(z, "w") as w:
        w.writestr("MetaQA/kb.txt", KB)
        w.writestr("MetaQA/1-hop/vanilla/qa_dev.txt", QA)
        w.writestr("MetaQA/1-hop/vanilla/qa_train.txt", "not wanted\n")
    into = tmp_path / "data"
    assert F.fetch(into, toy(None)[1:], sources=[z], log=lambda _: None) == []
    assert (into / "toyqa/kb.txt").read_text() == KB_OUT
    assert leftovers(into) == ["toyqa", "toyqa/kb.txt", "toyqa/qa_1hop_dev.txt"]
    assert F.main(["--into", str(into), "--from", str(tmp_path / "no.zip")]) == 2  # a typo is said, not ignored


def test_a_kb_line_that_is_no_triple_is_a_clear_error(tmp_path):
    (tmp_path / "kb.txt").write_text("a|b|c\nnot a triple\n")
    with pytest.raises(F.FetchError, match=r"kb.txt line 2: 1 fields, expected subject\|relation\|object"):
        F.metaqa_kb(tmp_path / "kb.txt", tmp_path / "out.txt")


# --- the real manifest ---------------------------------------------------------------------------------------

def real_data() -> Path:
    data = SHARED / "data"
    need(all((data / f.dest).exists() for d in F.DATASETS for f in d.files), f"{data} (the real data)")
    return data


def test_with_the_data_present_make_data_is_a_check_and_makes_no_request(server, tmp_path, capsys):
    _, url, requests = server
    data = real_data()
    assert F.main(["--into", str(data), "--mirror", url]) == 0
    assert requests == []
    assert "21 of 21 files in place" in capsys.readouterr().out
    assert F.main(["--into", str(data), "--check"]) == 0


def test_the_whole_manifest_from_a_mirror_of_the_publishers_files_lands_byte_identical(server, tmp_path,
                                                                                       monkeypatch):
    """A mirror made of the real files in each publisher's layout, MetaQA's kb.txt in its published form (with
    repeats, in another order): every file lands with the manifest's sha256, the converted kb included."""
    root, url, requests = server
    data = real_data()
    for ds in F.DATASETS:
        for f in ds.files:
            out = root / "m" / ds.release.key / f.path
            out.parent.mkdir(parents=True, exist_ok=True)
            if f.convert == "metaqa_kb":
                lines = (data / f.dest).read_text(encoding="utf-8").splitlines(keepends=True)
                lines += lines[::97]  # repeats, as in the published kb.txt
                random.Random(0).shuffle(lines)
                out.write_text("".join(lines), encoding="utf-8", newline="")
            else:
                out.symlink_to(data / f.dest)
    monkeypatch.setenv(F.MIRROR_ENV, f"{url}/m")  # the environment override, through the CLI's parser
    into = tmp_path / "data"
    assert F.main(["--into", str(into)]) == 0
    assert len(requests) == 21
    for ds in F.DATASETS:
        for f in ds.files:
            assert (into / f.dest).read_bytes() == (data / f.dest).read_bytes(), f.dest
    assert F.main(["--into", str(into), "--check", "metaqa"]) == 0


def test_the_manifest_covers_the_data_folder_and_the_readme_names_every_source_and_licence():
    """Every file under ../shared/data but its README is in the manifest, once; the README section gives each
    release's homepage and licence."""
    data = real_data()
    dests = [f.dest for d in F.DATASETS for f in d.files]
    assert len(dests) == len(set(dests))
    on_disk = sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file() and p.name != "README.md")
    assert sorted(dests) == on_disk
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Data: where each dataset comes from"):]
    for ds in F.DATASETS:
        assert ds.release.homepage.split()[0] in section, ds.name
        assert ds.release.licence.split(" (")[0].split(";")[0] in section, ds.name


def test_make_data_is_a_target_with_a_help_line_and_repro_runs_it():
    mk = (ROOT / "Makefile").read_text()
    assert "\ndata:" in mk and "-m kgrag.kg.fetch" in mk
    assert '@echo "make data' in mk
    assert any(line.startswith("repro:") and " data" in line for line in mk.splitlines())


def test_the_cli_has_a_data_subcommand(tmp_path, capsys):
    from kgrag.cli import main

    assert main(["data", "--list", "explagraphs"]) == 0
    out = capsys.readouterr().out
    assert "https://raw.githubusercontent.com/swarnaHub/ExplaGraphs/HEAD/data/train.tsv" in out and "MIT" in out
