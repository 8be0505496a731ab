"""scripts/build-image.py: the container image the chart runs. The archive is checked as an
OCI layout (every digest and size), by skopeo (a third-party reader of both the OCI and
the Docker archive format), against the chart's image name, for reproducibility, and —
as root — by running the sidecar from the image's own files alone: a chroot into its
unpacked, read-only root filesystem relaying real requests to a real upstream.

The binary is target/release/tailor (the test build; `TAILOR_BIN` names another)."""

import gzip
import hashlib
import http.client
import http.server
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "build-image.py")
BINARY = os.environ.get("TAILOR_BIN", os.path.join(ROOT, "target", "release", "tailor"))
REQUIRE_TOOLS = os.environ.get("TAILOR_REQUIRE_K8S_TOOLS") == "1"


def build(tmp_path, name="image.oci.tar", epoch="1764000000", *extra):
    if not os.access(BINARY, os.X_OK):
        pytest.fail(f"{BINARY} is missing: `cargo build --release -p tailor-cli` (scripts/test.sh builds it first)")
    out = tmp_path / name
    env = dict(os.environ, SOURCE_DATE_EPOCH=epoch)
    r = subprocess.run(["python3", SCRIPT, "--binary", BINARY, "--out", str(out), *extra],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return out, r.stdout


def blobs(archive):
    with tarfile.open(archive) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def chart_image():
    values = open(os.path.join(ROOT, "deploy", "helm", "tailor", "values.yaml")).read()
    block = re.search(r"^image:\n((?:  .*\n)+)", values, re.M).group(1)
    field = lambda k: re.search(rf"^  {k}: \"?([^\"\n]+)\"?$", block, re.M).group(1)
    return f"{field('repository')}:{field('tag')}"


def the_layer(files):
    index = json.loads(files["index.json"])
    manifest = json.loads(files["blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]])
    layer = files["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    return tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer)))


def test_the_archive_is_an_oci_layout_whose_digests_hold_and_names_the_charts_image(tmp_path):
    out, printed = build(tmp_path)
    files = blobs(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert sha(data).split(":")[1] == name.rsplit("/", 1)[1], f"{name}: content does not match its digest"
    index = json.loads(files["index.json"])
    [entry] = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == chart_image()
    manifest_bytes = files["blobs/sha256/" + entry["digest"].split(":")[1]]
    assert len(manifest_bytes) == entry["size"]
    manifest = json.loads(manifest_bytes)
    config_bytes = files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]]
    assert len(config_bytes) == manifest["config"]["size"]
    [layer_ref] = manifest["layers"]
    layer = files["blobs/sha256/" + layer_ref["digest"].split(":")[1]]
    assert len(layer) == layer_ref["size"]
    config = json.loads(config_bytes)
    # The config names the uncompressed layer: a loader checks exactly this.
    assert config["rootfs"]["diff_ids"] == [sha(gzip.decompress(layer))]
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/tailor"]
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in config["config"]["Env"]  # the chart runs `tailor ...`
    # Docker's format beside it points at the same blobs.
    [docker] = json.loads(files["manifest.json"])
    assert docker["RepoTags"] == [chart_image()]
    assert docker["Config"] == "blobs/sha256/" + manifest["config"]["digest"].split(":")[1]

    members = {m.name: m for m in the_layer(files).getmembers()}
    tailor = members["usr/local/bin/tailor"]
    assert tailor.isfile() and tailor.mode & 0o111 and tailor.uid == 0
    assert members["tmp"].mode == 0o1777
    # Every library the binary links is in the image, at the path the loader asks for.
    ldd = subprocess.run(["ldd", BINARY], capture_output=True, text=True).stdout
    for path in re.findall(r"(/\S+) \(0x", ldd):
        assert path.lstrip("/") in members, f"{path} (linked by tailor) is not in the image"
    assert f"image    {chart_image()}" in printed


def test_the_same_binary_and_time_give_the_same_image_and_another_time_another(tmp_path):
    a, _ = build(tmp_path, "a.oci.tar")
    b, _ = build(tmp_path, "b.oci.tar")
    c, _ = build(tmp_path, "c.oci.tar", "1764000001")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_a_missing_binary_is_named_with_the_command_that_builds_it(tmp_path):
    r = subprocess.run(["python3", SCRIPT, "--binary", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.tar")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "nothing" in r.stderr and "build-release.sh" in r.stderr
    assert not (tmp_path / "x.tar").exists()


def test_skopeo_reads_the_archive_as_oci_and_as_docker(tmp_path):
    if shutil.which("skopeo") is None:
        if REQUIRE_TOOLS:
            pytest.fail("skopeo is missing (.ci/run installs it: apt-get install skopeo)")
        pytest.skip("skopeo is missing: apt-get install skopeo")
    out, _ = build(tmp_path)
    for transport in ("oci-archive", "docker-archive"):
        r = subprocess.run(["skopeo", "inspect", f"{transport}:{out}"], capture_output=True, text=True)
        assert r.returncode == 0, f"skopeo inspect {transport}: {r.stderr}"
        info = json.loads(r.stdout)
        assert info["Architecture"] == "amd64" and info["Os"] == "linux"
        assert info["Labels"]["org.opencontainers.image.source"].endswith("/tailor")
    # A copy reads every blob and checks it against its digest.
    r = subprocess.run(["skopeo", "copy", "-q", f"oci-archive:{out}", f"dir:{tmp_path / 'copy'}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


class Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"upstream saw {self.path} context={bool(self.headers.get('tailor-context'))}\n".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def unpacked(tmp_path):
    """The image's root filesystem, unpacked; skips without root or unshare."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a chroot into the image's root filesystem, in a mount namespace)")
    out, _ = build(tmp_path)
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    the_layer(blobs(out)).extractall(rootfs, filter="tar")
    return rootfs


def in_image(rootfs, command, host_sys=False):
    """A shell line that runs `command` chrooted in `rootfs` as a container would: the tree
    bound read-only (the chart's readOnlyRootFilesystem), /proc of a new PID namespace
    inside it, with `host_sys` this machine's /sys (the node agent's hostPath). Run it under
    `unshare --mount --pid --fork`."""
    r = str(rootfs)
    sys_mount = f"mount --rbind /sys {r}/sys && " if host_sys else ""
    return (f"mount --bind {r} {r} && mount -t proc proc {r}/proc && {sys_mount}"
            f"mount -o remount,bind,ro {r} && exec chroot {r} {command}")


def test_the_node_agent_plans_this_node_from_the_image(tmp_path):
    rootfs = unpacked(tmp_path)
    r = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c",
                        in_image(rootfs, "/usr/local/bin/tailor node plan --pods --demand-cpus 1", host_sys=True)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"# node: {os.cpu_count()} CPUs" in r.stdout, r.stdout
    assert '[[tier]]\nname = "critical"' in r.stdout


def test_the_sidecar_runs_from_the_images_read_only_files_alone(tmp_path):
    rootfs = unpacked(tmp_path)
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port, admin = free_port(), free_port()
    (rootfs / "etc" / "tailor").mkdir()
    (rootfs / "etc" / "tailor" / "sidecar.toml").write_text(
        f'listen = "127.0.0.1:{port}"\nupstream = "127.0.0.1:{upstream.server_address[1]}"\n'
        f'admin = "127.0.0.1:{admin}"\norder = "orf"\ndrain_timeout_ms = 1000\n'
    )
    r = str(rootfs)
    # The sidecar sees the image's files and nothing of this machine's but the network.
    script = in_image(rootfs, "/usr/local/bin/tailor proxy sidecar --config /etc/tailor/sidecar.toml")
    log = open(tmp_path / "sidecar.log", "w")
    sidecar = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", script],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 10
        while "sidecar ready" not in (tmp_path / "sidecar.log").read_text():
            assert sidecar.poll() is None, f"the sidecar exited: {(tmp_path / 'sidecar.log').read_text()}"
            assert time.time() < deadline, f"no 'sidecar ready' in 10 s: {(tmp_path / 'sidecar.log').read_text()}"
            time.sleep(0.05)
        for i in range(20):
            status, body = get(port, f"/item/{i}")
            assert (status, body) == (200, f"upstream saw /item/{i} context=True\n")
        status, metrics = get(admin, "/metrics")
        assert status == 200
        served = re.search(r"^tailor_proxy_requests_total(?:\{[^}]*\})? (\d+)$", metrics, re.M)
        assert served and int(served.group(1)) >= 20, metrics[:2000]
        # The image cannot be written to, as in a pod with a read-only root filesystem.
        probe = subprocess.run(["unshare", "--mount", "sh", "-c",
                                f"mount --bind {r} {r} && mount -o remount,bind,ro {r} && touch {r}/tmp/x"],
                               capture_output=True, text=True)
        assert probe.returncode != 0 and "Read-only" in probe.stderr
        os.killpg(sidecar.pid, signal.SIGTERM)
        assert sidecar.wait(10) == 0, (tmp_path / "sidecar.log").read_text()
    finally:
        if sidecar.poll() is None:
            os.killpg(sidecar.pid, signal.SIGKILL)
            sidecar.wait()
        upstream.shutdown()
        log.close()


def test_another_name_is_carried_whole_and_a_registry_port_is_no_version(tmp_path):
    for tag, version in (("localhost:5000/tailor", "latest"), ("registry.example:5000/team/tailor:2.0-rc1", "2.0-rc1")):
        out, printed = build(tmp_path, "named.oci.tar", "1764000000", "--tag", tag)
        files = blobs(out)
        [entry] = json.loads(files["index.json"])["manifests"]
        assert entry["annotations"] == {"io.containerd.image.name": tag, "org.opencontainers.image.ref.name": version}
        assert json.loads(files["manifest.json"])[0]["RepoTags"] == [tag]
        assert f"image    {tag}" in printed
