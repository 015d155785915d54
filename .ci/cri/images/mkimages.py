#!/usr/bin/env python3
"""Builds, offline, every image make cri-test pulls, as OCI layouts.

critest v1.34.0 pulls its images by name (cri-tools' pkg/validate/consts.go,
pkg/framework/util.go, multi_container_linux.go, security_context_linux.go,
images/build); containerd 1.6 also needs its sandbox image. Each is rebuilt
here from local binaries, under the same repository and tag:

  busybox (the base layer of all but pause)  Debian's *dynamic* busybox with
      every applet a hardlink, its libraries, and util-linux's ipcs and
      procps' pgrep (applets the upstream image has and Debian's lacks).
      Not busybox-static: its standalone-shell applets never exec /bin/ls,
      which critest's MaskedPaths spec masks; not symlinks: masking /bin/ls
      would then mask /bin/busybox itself.
  pause       pause.c: exits on SIGINT/SIGTERM, reaps its children
  nginx, httpd, hostnet-nginx  fakeweb.c: HTTP 200 on a port
  nonewprivs  nnp.c, setuid root, run as 1000: prints its effective uid
  test-image-*  one file each (so every digest differs), or a USER
  moat-cri/users  for the crictl scenario: several users, and an
      Alpine-style /etc/group that lists root in other groups (from which
      containerd derives supplementary groups)

test-image-digest@sha256:9700f9a2... cannot be rebuilt: critest pins the
digest of the upstream bytes. Environment: BUSYBOX (the busybox binary),
BINS (the compiled stand-ins), OUT (where the layouts go, one per name).
"""
import gzip, hashlib, io, json, os, subprocess, tarfile

OUT = os.environ["OUT"]
BINS = os.environ["BINS"]
BB = os.environ["BUSYBOX"]
EXTRA = ["/usr/bin/ipcs", "/usr/bin/pgrep"]


def blob(layout, data, media):
    d = hashlib.sha256(data).hexdigest()
    p = os.path.join(layout, "blobs", "sha256")
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, d), "wb") as f:
        f.write(data)
    return {"mediaType": media, "digest": "sha256:" + d, "size": len(data)}


class Layer:
    """A tar layer with fixed owners and times, so its digest is stable."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.t = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.GNU_FORMAT)

    def _ti(self, name, typ, mode, uid=0, gid=0):
        ti = tarfile.TarInfo(name.lstrip("/"))
        ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = typ, mode, uid, gid, 0
        ti.uname = ti.gname = ""
        return ti

    def dir(self, name, mode=0o755, uid=0, gid=0):
        self.t.addfile(self._ti(name, tarfile.DIRTYPE, mode, uid, gid))

    def file(self, name, data, mode=0o644, uid=0, gid=0):
        if isinstance(data, str):
            data = data.encode()
        ti = self._ti(name, tarfile.REGTYPE, mode, uid, gid)
        ti.size = len(data)
        self.t.addfile(ti, io.BytesIO(data))

    def hostfile(self, name, path, mode=0o755):
        with open(path, "rb") as f:
            self.file(name, f.read(), mode)

    def hardlink(self, name, target):
        ti = self._ti(name, tarfile.LNKTYPE, 0o755)
        ti.linkname = target
        self.t.addfile(ti)

    def close(self):
        self.t.close()
        raw = self.buf.getvalue()
        return raw, gzip.compress(raw, mtime=0)


PASSWD = """root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
"""
GROUP = """root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
wheel:x:10:root
mail:x:12:
www-data:x:33:
operator:x:37:
users:x:100:
nogroup:x:65533:
nobody:x:65534:
"""


def libs_of(paths):
    out = set()
    for p in paths:
        ldd = subprocess.run(["ldd", p], capture_output=True, text=True, check=True).stdout
        out.update(x for line in ldd.splitlines() for x in line.split() if x.startswith("/"))
    return sorted(out)


def busybox_layer():
    L = Layer()
    for d in ["bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "home", "var", "var/run", "var/www",
              "var/spool", "var/spool/mail", "proc", "sys", "dev", "lib", "lib/x86_64-linux-gnu", "lib64"]:
        L.dir(d)
    L.dir("root", 0o700)
    L.dir("tmp", 0o1777)
    for lib in libs_of([BB] + EXTRA):
        L.hostfile(lib, os.path.realpath(lib))
    L.hostfile("bin/busybox", BB)
    apps = subprocess.run([BB, "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    for a in sorted(set(apps) - {"bin/busybox"}):
        L.hardlink(a, "bin/busybox")
    for e in EXTRA:
        L.hostfile(e, e)
    L.file("etc/passwd", PASSWD)
    L.file("etc/group", GROUP)
    L.file("etc/shadow", "root:*:10933:0:99999:7:::\n", 0o640)
    return L.close()


BASE = busybox_layer()


def image(name, tag, layers, cfg, base=True):
    """Adds name:tag to the layout OUT/name: BASE (unless base is False)
    and layers, a list of (raw, gzipped) tars, with the image config cfg."""
    layout = os.path.join(OUT, name)
    os.makedirs(layout, exist_ok=True)
    ls = ([BASE] if base else []) + layers
    descs = [blob(layout, gz, "application/vnd.oci.image.layer.v1.tar+gzip") for raw, gz in ls]
    c = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
    c.update(cfg)
    config = {"architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z", "config": c,
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest() for raw, gz in ls]},
              "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "moat .ci/cri/images/mkimages.py"}]}
    cd = blob(layout, json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": cd, "layers": descs}
    md = blob(layout, json.dumps(manifest, sort_keys=True).encode(), "application/vnd.oci.image.manifest.v1+json")
    idxp = os.path.join(layout, "index.json")
    idx = {"schemaVersion": 2, "manifests": []}
    if os.path.exists(idxp):
        with open(idxp) as f:
            idx = json.load(f)
    idx["manifests"] = [m for m in idx["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] != tag]
    md.update(annotations={"org.opencontainers.image.ref.name": tag}, platform={"architecture": "amd64", "os": "linux"})
    idx["manifests"].append(md)
    with open(idxp, "w") as f:
        json.dump(idx, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    print(f"{name}:{tag} {md['digest']}")


def one_file_layer(path, data=b"", mode=0o644):
    L = Layer()
    L.file(path, data, mode)
    return L.close()


def web_layer(binpath):
    L = Layer()
    L.hostfile(binpath, f"{BINS}/fakeweb")
    L.dir("usr/share/nginx")
    L.dir("usr/share/nginx/html")
    L.file("usr/share/nginx/html/index.html", "<h1>Welcome to nginx!</h1>\n")
    return L.close()


SH = {"Cmd": ["sh"]}
image("busybox", "1.29-2", [], SH)
L = Layer()
L.hostfile("pause", f"{BINS}/pause")
image("pause", "3.6", [L.close()], {"Entrypoint": ["/pause"]}, base=False)
for n in ["test-image-1", "test-image-2", "test-image-3", "test-image-latest", "test-image-digest"]:
    image(n, "latest", [one_file_layer(n)], SH)
for t in ["1", "2", "3"]:
    image("test-image-tags", t, [one_file_layer("same-image")], SH)
for t in ["test", "all"]:
    image("test-image-tag", t, [one_file_layer(t)], SH)
for n, u in {"test-image-user-uid": "1002", "test-image-user-username": "www-data",
             "test-image-user-uid-group": "1003:1004", "test-image-user-username-group": "www-data:1004"}.items():
    image(n, "latest", [], {"Cmd": ["sh"], "User": u})
L = Layer()
L.file("etc/passwd", PASSWD + "default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n")
L.file("etc/group", GROUP + "default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n")
L.dir("home/default-user")
image("test-image-predefined-group", "latest", [L.close()], {"Cmd": ["sh"], "User": "1000"})
image("nginx", "1.14-2", [web_layer("usr/sbin/nginx")],
      {"Entrypoint": ["/usr/sbin/nginx"], "ExposedPorts": {"80/tcp": {}}, "StopSignal": "SIGTERM"})
image("httpd", "2.4.39-4", [web_layer("usr/local/apache2/bin/httpd")],
      {"Entrypoint": ["/usr/local/apache2/bin/httpd"], "ExposedPorts": {"80/tcp": {}}})
image("hostnet-nginx-amd64", "latest", [web_layer("usr/sbin/nginx")],
      {"Entrypoint": ["/usr/sbin/nginx", "12003"], "ExposedPorts": {"12003/tcp": {}}})
L = Layer()
L.dir("usr/local")
L.dir("usr/local/bin")
with open(f"{BINS}/nnp", "rb") as f:
    L.file("usr/local/bin/nnp", f.read(), 0o4755)
image("nonewprivs", "1.3", [L.close()], {"Entrypoint": ["/usr/local/bin/nnp"], "User": "1000"})

# The scenario's image of several users: an Alpine-style /etc/group (root
# a member of bin, daemon, sys, adm, disk, wheel), a service user app
# (1000, also in group data 2000) owning its home, runs as root by default.
L = Layer()
L.file("etc/passwd", PASSWD + "app:x:1000:1000:app:/home/app:/bin/sh\n")
L.file("etc/group", """root:x:0:root
bin:x:1:root,bin,daemon
daemon:x:2:root,bin,daemon
sys:x:3:root,bin,adm
adm:x:4:root,adm,daemon
tty:x:5:
disk:x:6:root,adm
wheel:x:10:root
www-data:x:33:
users:x:100:
app:x:1000:
data:x:2000:app
nobody:x:65534:
""")
L.dir("home/app", 0o750, 1000, 1000)
L.dir("data", 0o770, 0, 2000)
image("users", "1", [L.close()], SH)
