#!/usr/bin/env python3
"""Builds the container image the Helm chart runs, without a container engine.

The image is `ghcr.io/tailor-project/tailor:<version>`, as deploy/helm/tailor and
deploy/kubernetes/tailor.yaml name it: an OCI image
archive holding one layer with the `tailor` binary, the C libraries it links (found with
`ldd`, copied from the machine that built it, with their copyright files) and a minimal
/etc. No shell, no package manager: `tailor` is the only program in it, as in a distroless
image.

    bash scripts/build-release.sh            # the PGO release build, what to deploy
    python3 scripts/build-image.py           # -> target/image/tailor-<version>.oci.tar

then, for the cluster:

    docker load -i target/image/tailor-0.1.0.oci.tar                   # Docker 25+
    kind load image-archive target/image/tailor-0.1.0.oci.tar          # a kind cluster
    skopeo copy oci-archive:target/image/tailor-0.1.0.oci.tar \\
        docker://REGISTRY/tailor:0.1.0                                  # any registry
    # k3s / containerd: ctr -n k8s.io images import target/image/tailor-0.1.0.oci.tar

The archive is an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/...`) that also
carries Docker's `manifest.json`, so Docker's own loader and skopeo's `docker-archive:`
read it too. It is reproducible: entries sorted, owners 0, times set to
SOURCE_DATE_EPOCH (default: the commit time of HEAD), so the same binary gives the same
digest. `--binary` picks another build (e.g. target/release/tailor); `--tag` another name.
"""
import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPOSITORY = "ghcr.io/tailor-project/tailor"
SOURCE = "https://github.com/tailor-project/tailor"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
# The uid distroless images give their unprivileged user; the chart's proxies may run as it.
NONROOT = 65532
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


class ImageError(Exception):
    pass


def version():
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


def tag_version(tag):
    """The version part of an image name: `0.1.0` of `ghcr.io/x/tailor:0.1.0`, `latest`
    when it has none (a registry's port is not one: `localhost:5000/tailor`)."""
    last = tag.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else "latest"


def git(*args):
    r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def source_date_epoch():
    value = os.environ.get("SOURCE_DATE_EPOCH") or git("log", "-1", "--format=%ct") or "0"
    try:
        return int(value)
    except ValueError:
        raise ImageError(f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds; unset it or give one")


def binary_revision(binary):
    """The commit `binary` was built from, as its `--version` prints it ("tailor 0.1.0
    (commit 29ef6d7)"); running it also shows it starts on this machine at all."""
    r = subprocess.run([binary, "--version"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ImageError(f"{binary} --version failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}")
    m = re.search(r"commit ([0-9a-f]{7,40})", r.stdout)
    return m.group(1) if m else ""


def linked_libraries(binary):
    """The shared objects the dynamic loader maps for `binary`, the loader itself included,
    as (path in the image, file on this machine). Empty for a static binary."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    text = r.stdout + r.stderr
    if "not a dynamic executable" in text or "statically linked" in text:
        return []
    if r.returncode != 0:
        raise ImageError(f"ldd {binary} failed: {text.strip()}")
    libs = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if "=> not found" in line:
            raise ImageError(f"{binary} needs {line.split()[0]}, which this machine lacks (ldd: {line})")
        m = re.match(r"\S+ => (/\S+) \(0x", line) or re.match(r"(/\S+) \(0x", line)
        if m:  # linux-vdso.so.1 has no file
            libs.append(m.group(1))
    return [(path, os.path.realpath(path)) for path in libs]


def copyright_files(libraries):
    """/usr/share/doc/PACKAGE/copyright of the Debian packages that ship `libraries`, where
    dpkg knows them (the licences travel with the libraries)."""
    files = []
    for path, real in libraries:
        # dpkg knows a file by the path its package installed it at: with /lib a symlink
        # to usr/lib (merged /usr), that may be either.
        try:
            r = subprocess.run(["dpkg", "-S", path, real], capture_output=True, text=True)
        except FileNotFoundError:
            return []  # not a Debian-family machine
        for package in {line.split(":")[0] for line in r.stdout.splitlines() if ":" in line}:
            notice = f"/usr/share/doc/{package}/copyright"
            if os.path.isfile(notice) and notice not in files:
                files.append(notice)
    return sorted(files)


class Layer:
    """A reproducible layer tar: entries sorted by path, owner root, one mtime."""

    def __init__(self, mtime):
        self.mtime = mtime
        self.entries = {}  # path in the image -> (TarInfo, bytes or None)

    def _info(self, path, kind, mode):
        info = tarfile.TarInfo(path.lstrip("/"))
        info.type, info.mode, info.mtime = kind, mode, self.mtime
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    def directory(self, path, mode=0o755):
        if path in ("", "/"):
            return
        parent = os.path.dirname(path.rstrip("/"))
        if parent not in ("", "/"):
            self.directory(parent)
        if path not in self.entries:
            self.entries[path] = (self._info(path, tarfile.DIRTYPE, mode), None)

    def file(self, path, data, mode=0o644):
        self.directory(os.path.dirname(path))
        info = self._info(path, tarfile.REGTYPE, mode)
        info.size = len(data)
        self.entries[path] = (info, data)

    def tar(self):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
            for path in sorted(self.entries):
                info, data = self.entries[path]
                t.addfile(info, io.BytesIO(data) if data is not None else None)
        return out.getvalue()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def without_debug_info(binary):
    """`binary` less its DWARF sections (objcopy --strip-debug: 63 -> 15 MB for the release
    build); the symbol table stays, so a panic's backtrace still names functions."""
    with tempfile.TemporaryDirectory() as tmp:
        stripped = os.path.join(tmp, "tailor")
        try:
            r = subprocess.run(["objcopy", "--strip-debug", binary, stripped], capture_output=True, text=True)
        except FileNotFoundError:
            raise ImageError("objcopy is missing: install binutils, or pass --keep-debug-info")
        if r.returncode != 0:
            raise ImageError(f"objcopy --strip-debug {binary} failed: {r.stderr.strip()}; or pass --keep-debug-info")
        return read(stripped)


def root_filesystem(binary, mtime, keep_debug_info):
    layer = Layer(mtime)
    for d in ("/usr/local/bin", "/etc", "/proc", "/sys", "/dev", "/run", "/var"):
        layer.directory(d)
    layer.directory("/tmp", 0o1777)
    layer.file("/usr/local/bin/tailor", read(binary) if keep_debug_info else without_debug_info(binary), 0o755)
    libraries = linked_libraries(binary)
    for path, real in libraries:
        # The file at the path the loader asks for (a symlink on this machine is followed:
        # the image needs the bytes, not this machine's layout of them).
        layer.file(path, read(real), 0o755)
    for path in copyright_files(libraries):
        layer.file(path, read(path))
    layer.file("/etc/passwd", f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n".encode())
    layer.file("/etc/group", f"root:x:0:\nnonroot:x:{NONROOT}:\n".encode())
    # glibc's resolver reads it; the kubelet mounts /etc/hosts and /etc/resolv.conf.
    layer.file("/etc/nsswitch.conf", b"hosts: files dns\n")
    layer.directory("/root", 0o700)
    layer.directory("/home/nonroot", 0o755)
    return layer, libraries


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(binary, tag, mtime, keep_debug_info=False):
    """The archive's bytes and its manifest's digest."""
    if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        raise ImageError(
            f"--binary {binary}: no executable there; build it first (`bash scripts/build-release.sh` "
            "for target/pgo/optimized/release/tailor, or `cargo build --release` and "
            "--binary target/release/tailor)"
        )
    arch = ARCHITECTURES.get(platform.machine())
    if arch is None:
        raise ImageError(f"this machine's architecture {platform.machine()!r} has no OCI name here; add it to ARCHITECTURES")
    layer, libraries = root_filesystem(binary, mtime, keep_debug_info)
    layer_tar = layer.tar()
    # mtime=0 in gzip's header and no file name: the same tar gives the same bytes.
    layer_gz = gzip.compress(layer_tar, compresslevel=6, mtime=0)
    ver = tag_version(tag)
    created = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {
        "org.opencontainers.image.title": "tailor",
        "org.opencontainers.image.description": "Tailor: GAT-ordered scheduling, the edge and sidecar proxy, the node agent",
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.version": ver,
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    revision = binary_revision(binary)
    if revision:
        labels["org.opencontainers.image.revision"] = revision
    config = {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {
            "Entrypoint": ["/usr/local/bin/tailor"],
            "Cmd": ["--help"],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(layer_tar)]},
        "history": [{"created": created, "created_by": "scripts/build-image.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": digest(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": OCI_LAYER, "digest": digest(layer_gz), "size": len(layer_gz)}],
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": digest(manifest_bytes),
                "size": len(manifest_bytes),
                "platform": {"architecture": arch, "os": "linux"},
                # containerd (kind, k3s) and Docker name the image after this one.
                "annotations": {"io.containerd.image.name": tag, "org.opencontainers.image.ref.name": ver},
            }
        ],
    }
    blob = lambda b: "blobs/sha256/" + digest(b).split(":")[1]
    # Docker's own archive format beside the OCI layout (as `docker save` writes since 25).
    docker_manifest = [{"Config": blob(config_bytes), "RepoTags": [tag], "Layers": [blob(layer_gz)]}]
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True, separators=(",", ":")).encode(),
        "manifest.json": json.dumps(docker_manifest, separators=(",", ":")).encode(),
        blob(config_bytes): config_bytes,
        blob(manifest_bytes): manifest_bytes,
        blob(layer_gz): layer_gz,
    }
    archive = Layer(mtime)
    archive.directory("blobs/sha256")
    for path, data in files.items():
        archive.file(path, data)
    return archive.tar(), digest(manifest_bytes), len(layer_tar), libraries


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--binary", default=os.path.join(ROOT, "target/pgo/optimized/release/tailor"),
                   help="the tailor build to package (default: the release build of scripts/build-release.sh)")
    p.add_argument("--tag", default=f"{REPOSITORY}:{version()}", help="the image's name (default: the chart's)")
    p.add_argument("--out", help="the archive to write (default: target/image/tailor-<version>.oci.tar)")
    p.add_argument("--keep-debug-info", action="store_true", help="package the binary with its DWARF sections (4x the size)")
    args = p.parse_args()
    out = args.out or os.path.join(ROOT, "target/image", f"tailor-{tag_version(args.tag)}.oci.tar")
    try:
        data, manifest_digest, layer_size, libraries = build(args.binary, args.tag, source_date_epoch(), args.keep_debug_info)
    except ImageError as e:
        sys.exit(f"build-image: {e}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".part", "wb") as f:
        f.write(data)
    os.replace(out + ".part", out)
    libs = ", ".join(os.path.basename(p) for p, _ in libraries) or "none (static)"
    print(f"build-image: {out}")
    print(f"  image    {args.tag}")
    print(f"  manifest {manifest_digest}")
    print(f"  binary   {args.binary}")
    print(f"  libraries {libs}; {layer_size / 1e6:.1f} MB unpacked, {len(data) / 1e6:.1f} MB archive")
    print(f"load it: docker load -i {out}  |  kind load image-archive {out}  |  "
          f"skopeo copy oci-archive:{out} docker://REGISTRY/tailor:{tag_version(args.tag)}")


if __name__ == "__main__":
    main()
