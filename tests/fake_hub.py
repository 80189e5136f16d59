"""A small Hugging Face Hub stand-in on 127.0.0.1: the endpoints ``create_repo`` + ``create_commit`` call.

huggingface-hub's real client talks to it through ``HF_ENDPOINT``. It implements:

* ``POST /api/repos/create``                      create a model repo (records ``visibility``)
* ``POST /api/models/{repo}/branch/{branch}``     create a branch
* ``POST /api/validate-yaml``                     parse the README front matter with PyYAML
* ``POST /api/models/{repo}/preupload/{rev}``     upload mode per file: ``lfs`` for binaries or
                                                  ``regular`` for all (``lfs=False``)
* ``POST /{repo}.git/info/lfs/objects/batch``     LFS batch: one upload + verify action per object
* ``PUT  /lfs-storage/{oid}``                     the "S3" PUT, checks the sha256 of the body
* ``POST /lfs-verify``                            LFS verify
* ``POST /api/models/{repo}/commit/{rev}``        the ndjson commit (base64 files and LFS pointers)

and records what arrived: every request (method, path, query, Authorization header) and each
commit's files as ``{path: sha256}``. ``GET /api/agent-harnesses`` (a tokenless telemetry lookup
huggingface-hub makes) answers 404; anything else answers 404 and is listed in ``unhandled``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".onnx", ".onnx_data", ".bin")


@dataclass
class Commit:
    repo_id: str
    revision: str
    create_pr: bool
    summary: str
    description: str
    files: dict[str, str]  # path -> sha256 of the content that arrived
    lfs_paths: list[str]


@dataclass
class FakeHub:
    token: str
    lfs: bool = True  # answer "lfs" for binary files (else every file is "regular", inlined in the commit)
    fail_status: int | None = None  # answer every API call with this status (and echo the token: redaction test)
    requests: list[dict] = field(default_factory=list)
    repos: dict[str, dict] = field(default_factory=dict)
    commits: list[Commit] = field(default_factory=list)
    branches: list[tuple[str, str]] = field(default_factory=list)
    storage: dict[str, bytes] = field(default_factory=dict)
    yaml_checked: list[dict] = field(default_factory=list)
    unhandled: list[str] = field(default_factory=list)
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeHub

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    # --- plumbing ---------------------------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))

    def _send(self, status: int, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {self.fake.token}"

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        body = self._body()
        self.fake.requests.append({"method": method, "path": path, "query": query,
                                   "authorization": self.headers.get("Authorization")})
        fake = self.fake
        if path == "/api/agent-harnesses":  # huggingface-hub's best-effort telemetry lookup, sent without a token
            return self._send(404, {"error": "not served here"})
        if path.startswith("/lfs-storage/") and method == "PUT":  # presigned storage URL: no Hub token
            oid = path.rsplit("/", 1)[1]
            if hashlib.sha256(body).hexdigest() != oid:
                return self._send(400, {"error": "sha256 mismatch"})
            fake.storage[oid] = body
            return self._send(200, {})
        if not self._authorized():
            return self._send(401, {"error": "Invalid credentials in Authorization header"})
        if fake.fail_status is not None:
            return self._send(fake.fail_status, {"error": f"token {fake.token} may not write to this namespace"})
        payload = json.loads(body) if body and method == "POST" and "/commit/" not in path else None
        if method == "POST" and path == "/api/repos/create":
            repo_id = f"{payload['organization']}/{payload['name']}"
            if repo_id in fake.repos:
                return self._send(409, {"error": "You already created this model repo", "url": f"{fake.url}/{repo_id}"})
            fake.repos[repo_id] = {"payload": payload, "branches": {"main"}}
            return self._send(200, {"url": f"{fake.url}/{repo_id}"})
        if method == "POST" and path == "/api/validate-yaml":
            return self._validate_yaml(payload)
        if method == "POST" and path == "/lfs-verify":
            ok = len(fake.storage.get(payload["oid"], b"")) == payload["size"] and payload["oid"] in fake.storage
            return self._send(200 if ok else 404, {} if ok else {"error": "object not found"})
        if method == "POST" and path.endswith(".git/info/lfs/objects/batch"):
            return self._lfs_batch(payload)
        if method == "POST" and path.startswith("/api/models/"):
            rest = path[len("/api/models/"):]
            for verb in ("preupload", "commit", "branch"):
                marker = f"/{verb}/"
                if marker in rest:
                    repo_id, revision = rest.split(marker, 1)
                    if repo_id not in fake.repos:
                        return self._send(404, {"error": "Repository not found"})
                    return getattr(self, f"_{verb}")(repo_id, revision, query, payload if verb != "commit" else body)
        fake.unhandled.append(f"{method} {path}")
        return self._send(404, {"error": f"not implemented: {method} {path}"})

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_GET(self) -> None:
        self._handle("GET")

    # --- endpoints --------------------------------------------------------------------------------
    def _validate_yaml(self, payload) -> None:
        import yaml

        content = payload["content"]
        errors = []
        if not content.startswith("---\n"):
            errors.append({"message": "no YAML front matter"})
        else:
            try:
                meta = yaml.safe_load(content.split("---\n", 2)[1])
                self.fake.yaml_checked.append(meta)
                if not isinstance(meta, dict):
                    errors.append({"message": "front matter is not a mapping"})
            except yaml.YAMLError as e:
                errors.append({"message": f"invalid YAML: {e}"})
        self._send(400 if errors else 200, {"errors": errors, "warnings": []})

    def _preupload(self, repo_id, revision, query, payload) -> None:
        files = [{"path": f["path"], "uploadMode": "lfs" if self.fake.lfs and f["path"].endswith(LFS_SUFFIXES)
                  else "regular", "shouldIgnore": False, "oid": None} for f in payload["files"]]
        self._send(200, {"files": files, "commitOid": "0" * 40})

    def _lfs_batch(self, payload) -> None:
        objects = [{"oid": o["oid"], "size": o["size"], "authenticated": True,
                    "actions": {"upload": {"href": f"{self.fake.url}/lfs-storage/{o['oid']}"},
                                "verify": {"href": f"{self.fake.url}/lfs-verify"}}}
                   for o in payload["objects"]]
        self._send(200, {"transfer": "basic", "objects": objects})

    def _branch(self, repo_id, branch, query, payload) -> None:
        branches = self.fake.repos[repo_id]["branches"]
        if branch in branches:
            return self._send(409, {"error": "Reference already exists"})
        branches.add(branch)
        self.fake.branches.append((repo_id, branch))
        self._send(200, {})

    def _commit(self, repo_id, revision, query, body: bytes) -> None:
        fake = self.fake
        create_pr = query.get("create_pr") == ["1"]
        if not create_pr and revision not in fake.repos[repo_id]["branches"]:
            return self._send(404, {"error": f"Invalid rev id: {revision}"})
        header, files, lfs_paths = {}, {}, []
        for line in body.decode().splitlines():
            item = json.loads(line)
            value = item["value"]
            if item["key"] == "header":
                header = value
            elif item["key"] == "file":
                files[value["path"]] = hashlib.sha256(base64.b64decode(value["content"])).hexdigest()
            elif item["key"] == "lfsFile":
                if value["oid"] not in fake.storage:
                    return self._send(422, {"error": f"LFS object {value['oid']} was never uploaded"})
                files[value["path"]] = value["oid"]
                lfs_paths.append(value["path"])
        fake.commits.append(Commit(repo_id=repo_id, revision=revision, create_pr=create_pr,
                                   summary=header.get("summary", ""), description=header.get("description", ""),
                                   files=files, lfs_paths=lfs_paths))
        oid = uuid.uuid4().hex + uuid.uuid4().hex[:8]
        answer = {"commitUrl": f"{fake.url}/{repo_id}/commit/{oid}", "commitOid": oid}
        if create_pr:
            answer["pullRequestUrl"] = f"{fake.url}/{repo_id}/discussions/{len(fake.commits)}"
        self._send(200, answer)
