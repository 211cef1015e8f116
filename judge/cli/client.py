"""The CLI as a client of a judge server (`--server URL` or JUDGE_SERVER, with JUDGE_TOKEN): the same library calls
the CLI makes on a local ledger, each answered by the server, with the same return values, so every command prints
the same text and the same `--json`. Files are read here, on the agent's machine; reports and briefs are written
here, under `--out`, as `judge report` and `judge brief` would write them."""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import quote, urlencode, urlsplit

from .. import __version__
from ..errors import JudgeError

if TYPE_CHECKING:  # imported where a call needs them: a read through the server loads no ledger and no pydantic
    from ..actions import CastVote
    from ..ledger import Submitted
    from ..records import Proposal, Shark, Vote
    from ..wire import JobAnswer

WAIT_S = 25.0  # how long one request of `judge run` and `judge watch` waits on the server for a round's next event


class RemoteError(JudgeError):
    """The server's error object, with the exit code it says (and the HTTP status it came with)."""

    def __init__(self, message: str, exit: int = 2, status: int = 0):
        super().__init__(message)
        self.exit = exit
        self.status = status


class Remote:
    """A judge server, called as the library is: methods named after the functions the CLI calls locally."""

    def __init__(self, url: str, token: Optional[str], timeout_s: float = 300.0):
        self.url = url.rstrip("/")
        self.parts, self.timeout_s = urlsplit(self.url), timeout_s
        self.headers = {"User-Agent": f"judge/{__version__}", "Accept": "application/json"}
        self.token = token
        self.connection = None

    def _check(self) -> None:
        """The server's address and the token, checked at the first call (where a command's errors are one line)."""
        if self.parts.scheme not in ("http", "https") or not self.parts.hostname:
            raise JudgeError(f"--server '{self.url}': expected http://HOST[:PORT] or https://HOST[:PORT]")
        if self.token and "Authorization" not in self.headers:
            self.headers["Authorization"] = f"Bearer {_token(self.token)}"

    def _connect(self):
        """One keep-alive connection (http.client: it loads in a fraction of httpx's time, and a command makes a
        few requests at most), through the proxy the environment names for the server's scheme, if any."""
        if self.connection is None:
            kind = http.client.HTTPSConnection if self.parts.scheme == "https" else http.client.HTTPConnection
            proxy = _proxy(self.parts)
            if proxy is None:
                self.connection = kind(self.parts.hostname, self.parts.port, timeout=self.timeout_s)
            else:  # a tunnel (CONNECT) through the proxy, for http and https alike
                self.connection = kind(proxy.hostname, proxy.port, timeout=self.timeout_s)
                self.connection.set_tunnel(self.parts.hostname, self.parts.port)
        return self.connection

    def _request(self, method: str, target: str, content: Optional[bytes]) -> tuple[int, str]:
        headers = dict(self.headers)
        if content is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile is opened again, once (a read)
            connection = self._connect()
            try:
                connection.request(method, target, body=content, headers=headers)
                response = connection.getresponse()
                return response.status, response.read().decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                self.connection = None
                if attempt or method != "GET" or not _stale(error):
                    raise

    def _call(self, method: str, path: str, body: Any = None, **params) -> Any:
        self._check()
        params = {k: v for k, v in params.items() if v is not None}
        content = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        target = (self.parts.path.rstrip("/") + path) + (f"?{urlencode(params)}" if params else "")
        try:
            status, text = self._request(method, target, content)
        except (OSError, http.client.HTTPException) as error:
            raise JudgeError(f"{self.url}: cannot reach the judge server ({type(error).__name__}: {error})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise JudgeError(f"{self.url}{path}: not a judge server's answer (HTTP {status})") from None
        if status >= 400:
            if isinstance(data, dict) and isinstance(data.get("error"), str):
                raise RemoteError(data["error"], int(data.get("exit", 2)), status)
            raise JudgeError(f"{self.url}{path}: HTTP {status}")
        return data

    # the commands' calls ---------------------------------------------------------------------------------------

    def ledger_info(self) -> dict:
        return self._call("GET", "/api/ledger")

    def default_author(self) -> Optional[str]:
        """The author a proposal that leaves it out gets: the participant a contestant's token names, as the server
        would fill it in (an organizer submits for others, and names them)."""
        me = self._call("GET", "/api/whoami")
        return me["name"] if me.get("role") == "contestant" else None

    def with_author(self, text: str, author: Optional[str]) -> str:
        """A proposal on stdin that leaves `author` out gets `author`; anything else is left as it is, for the local
        reading to accept or refuse as it always does."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return text
        if author is None or not isinstance(data, dict) or "author" in data:
            return text
        return json.dumps({**data, "author": author})

    def submit(self, items: list[tuple[Proposal, str]], kernels_dir: Path) -> list[Submitted]:
        from ..ledger import Submitted

        body = {"submissions": [{"source": source, "proposal": p.model_dump(mode="json")} for p, source in items]}
        return [Submitted(**row) for row in self._call("POST", "/api/proposals", body)]

    def add_sharks(self, sharks: list[tuple[Shark, str]]) -> list[dict]:
        body = {"submissions": [{"source": source, "shark": s.model_dump(mode="json")} for s, source in sharks]}
        return self._call("POST", "/api/sharks", body)

    def shark_list(self) -> list[dict]:
        return self._call("GET", "/api/sharks")

    def cast_votes(self, items: list[tuple[Vote, str]]) -> list[CastVote]:
        from ..actions import CastVote

        body = {"submissions": [{"source": source, "vote": v.model_dump(mode="json")} for v, source in items]}
        return [CastVote(**row) for row in self._call("POST", "/api/votes", body)]

    def list_proposals(self, round: Optional[int] = None) -> list[dict]:
        return self._call("GET", "/api/proposals", round=round)

    def show_proposal(self, proposal_id: str) -> dict:
        return self._call("GET", f"/api/proposals/{quote(proposal_id, safe='')}")

    def status(self) -> dict:
        return self._call("GET", "/api/status")

    def clear_evaluation(self, evaluation_id: int, note: str, cleared_by: str) -> dict:
        """Cleared by the organizer whose token this is (the server records its name, not `cleared_by`)."""
        return self._call("POST", f"/api/evaluations/{evaluation_id}/clear", {"note": note})

    def base(self, kernels_dir: Path, target: Optional[str], round: Optional[int]) -> dict:
        """The round's base as the server's ledger and targets make it, the same fields `judge base` reads locally."""
        from ..wire import BaseAnswer

        return BaseAnswer.model_validate(self._call("GET", "/api/base", target=target, round=round)).model_dump()

    def refresh_reports(self, target: str, round: int, out_dir: Path) -> list[Path]:
        """What a clearance changed, rendered again here from the server's views, as judge.round_actions.refresh_reports
        renders it on a local ledger: the round's report (each file of it that exists in `out_dir`, else the target's
        own), the leaderboard, and the next round's brief where one was written."""
        out_dir = Path(out_dir)
        paths = []
        if (out_dir / f"round-{round}.md").exists():
            paths.append(self.write_report(round, None, False, out_dir)[0])
        if (out_dir / f"round-{round}-{target}.md").exists() or not paths:
            paths.append(self.write_report(round, target, False, out_dir)[0])
        paths.append(self.write_report(None, None, True, out_dir)[0])
        if (out_dir / f"brief-round-{round + 1}-{target}.md").exists():
            paths.append(self.brief(out_dir, target, round + 1, out_dir)[0])
        return list(dict.fromkeys(paths))

    def brief(self, kernels_dir: Path, target: Optional[str], round: Optional[int], out_dir: Path) -> tuple[Path, dict]:
        data = self._call("GET", "/api/brief", target=target, round=round)
        return _write(Path(out_dir), data["name"], data["markdown"], {}), data["brief"]

    def write_report(self, round: Optional[int], target: Optional[str], leaderboard: bool,
                     out_dir: Path) -> tuple[Path, str, dict]:
        if leaderboard:
            data = self._call("GET", "/api/leaderboard")
            return _write(Path(out_dir), data["name"], data["markdown"], data["charts"]), "leaderboard", data["leaderboard"]
        data = self._call("GET", "/api/scorecards", round=round, target=target)
        return _write(Path(out_dir), data["name"], data["markdown"], data["charts"]), "round", data["round"]

    def run(self, round: Optional[int], target: Optional[str], again: bool, workers: Optional[int],
            timing_budget: Optional[float], on_event, out_dir: Path, follow: bool = False) -> list[dict]:
        """Start the round on the server, show its events as they come, and write its report here once it is done.
        `follow`: where the server runs a round already, attach to that one instead of being refused."""
        from ..wire import JobAnswer

        body = {"round": round, "target": target, "again": again, "workers": workers, "timing_budget": timing_budget}
        try:
            job = JobAnswer.read(self._call("POST", "/api/rounds", body))
        except RemoteError as refused:
            if not (follow and refused.status == 409):
                raise
            job = self.job(None)
        summaries = self.follow(job, on_event)
        self._report(job, summaries, out_dir)
        return summaries or []

    def job(self, job_id: Optional[int], since: int = 0, wait: float = 0) -> "JobAnswer":
        """A round job as this participant may read it (None: the running one, else the last one started)."""
        from ..wire import JobAnswer

        where = "latest" if job_id is None else str(job_id)
        return JobAnswer.read(self._call("GET", f"/api/jobs/{where}", since=since, wait=wait or None))

    def follow(self, job: "JobAnswer", on_event) -> Optional[list[dict]]:
        """A round job's events, each handed to `on_event(kind, **fields)` as a local run's are, as they land (a long
        poll of WAIT_S at a time), until it ends; then its summaries (an organizer's) returned, or its error raised."""
        while True:
            for event in job.events:
                on_event(event.kind, **event.fields())
            if job.state != "running":
                break
            job = self.job(job.job, since=job.next, wait=WAIT_S)
        if job.state == "failed":
            raise RemoteError(job.error.error, job.error.exit)
        return job.summaries

    def _report(self, job: "JobAnswer", summaries: Optional[list[dict]], out_dir: Path) -> None:
        """The round's report written here, as a local run writes it; each summary names it."""
        if summaries:
            path, _, _ = self.write_report(job.round, job.target, False, out_dir)
            for summary in summaries:
                summary["report"] = str(path)

    # participants ------------------------------------------------------------------------------------------------

    def add_participant(self, name: str, role: str) -> dict:
        return self._call("POST", "/api/participants", {"name": name, "role": role})

    def participant_list(self) -> list[dict]:
        return self._call("GET", "/api/participants")

    def revoke_participant(self, name: str) -> dict:
        return self._call("DELETE", f"/api/participants/{quote(name, safe='')}")


def _token(token: str) -> str:
    """JUDGE_TOKEN as sent: surrounding whitespace (a pasted newline or space) left out; a token with other
    characters a header cannot carry is refused without being printed."""
    token = token.strip()
    if not token or any(ord(c) < 33 or ord(c) > 126 for c in token):
        raise JudgeError("JUDGE_TOKEN holds characters a token never has (spaces, control or non-ASCII characters): "
                         "set it to the token 'judge participant add' printed, alone")
    return token


def _proxy(server):
    """The proxy (urlsplit) the environment names for `server`'s scheme (http_proxy, https_proxy, all_proxy), unless
    no_proxy covers its host; None where none is set (then urllib is not even imported)."""
    if not any(k.lower() in ("http_proxy", "https_proxy", "all_proxy") for k in os.environ):
        return None
    import urllib.request

    if urllib.request.proxy_bypass_environment(server.hostname):
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(server.scheme) or proxies.get("all")
    if not proxy:
        return None
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return parts if parts.hostname else None


def _stale(error: Exception) -> bool:
    """Whether a request failed because a kept-alive connection was closed by the server (worth one retry)."""
    return isinstance(error, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected))


def _write(out_dir: Path, name: str, markdown: str, charts: dict[str, str]) -> Path:
    """A document the server rendered, written where the local command writes it, its charts beside it."""
    if Path(name).name != name or not name.endswith(".md"):
        raise JudgeError(f"the server named a document '{name}': not a file name judge writes")
    out_dir.mkdir(parents=True, exist_ok=True)
    for chart, svg in charts.items():
        if Path(chart).name != chart or not chart.endswith(".svg"):
            raise JudgeError(f"the server named a chart '{chart}': not a file name judge writes")
        (out_dir / chart).write_text(svg)
    path = out_dir / name
    path.write_text(markdown)
    return path
