"""The exec probes' decisions (pure): each probe passes on a sound answer, fails on the pod
state that breaks it, and is skipped (never passed) when it could not decide."""

from __future__ import annotations

import pytest

from ironflow.cluster import checks
from ironflow.cluster.checks import EXEC_PROBES, Outcome, ProbeRun, decide_exec_probe

TOKEN, ROOT, EGRESS, ENV, PROXY = EXEC_PROBES


def ok(stdout: str, pod: str = "p1") -> ProbeRun:
    return ProbeRun(pod, 0, stdout)


@pytest.mark.parametrize(
    ("probe", "sound", "broken", "fragment"),
    [
        (TOKEN, "sa-token=absent\n", "sa-token=present\n", "service-account token is mounted"),
        (ROOT, "root=ro,relatime\ntouch=refused\n", "root=rw,relatime\ntouch=ok\n", "root filesystem is writable"),
        (EGRESS, "egress=blocked\n", "egress=open\n", "egress is not limited"),
        (ENV, "sk-ant=0\n", "sk-ant=2\n", "2 environment variable(s) contain sk-ant"),
        (PROXY, "proxy=401\n", "proxy=200\n", "answered HTTP 200 to an unknown token from inside the pod"),
        (PROXY, "proxy=401\n", "proxy=no-url\n", "no ANTHROPIC_BASE_URL"),
    ],
)
def test_each_probe_passes_when_sound_and_fails_when_broken(
    probe: checks.ExecProbe, sound: str, broken: str, fragment: str
) -> None:
    assert decide_exec_probe(probe, [ok(sound)]).outcome is Outcome.PASS
    failed = decide_exec_probe(probe, [ok(sound, "good"), ok(broken, "bad")])
    assert failed.outcome is Outcome.FAIL
    assert failed.why.startswith("bad: ")
    assert fragment in failed.why
    assert "good" not in failed.why


def test_a_read_write_root_fails_even_when_touch_is_refused_for_permission() -> None:
    result = decide_exec_probe(ROOT, [ok("root=rw,relatime\ntouch=refused\n")])
    assert result.outcome is Outcome.FAIL
    assert "mounted read-write" in result.why


def test_a_root_without_a_mounts_answer_passes_on_the_refused_touch() -> None:
    assert decide_exec_probe(ROOT, [ok("root=\ntouch=refused\n")]).outcome is Outcome.PASS


def test_no_http_client_skips_the_egress_probe() -> None:
    result = decide_exec_probe(EGRESS, [ok("egress=no-client\n")])
    assert result.outcome is Outcome.SKIPPED
    assert "neither curl nor wget" in result.why


@pytest.mark.parametrize(
    ("run", "fragment"),
    [
        (ProbeRun("p1", error="this account may not exec"), "p1: this account may not exec"),
        (ProbeRun("p1", 127, ""), "the probe exited 127"),
        (ok("garbage"), "no sa-token answer"),
    ],
)
def test_a_probe_that_could_not_decide_is_skipped_never_passed(run: ProbeRun, fragment: str) -> None:
    result = decide_exec_probe(TOKEN, [ok("sa-token=absent\n", "p0"), run])
    assert result.outcome is Outcome.SKIPPED
    assert fragment in result.why
    assert not checks.all_passed([result])


def test_a_failure_wins_over_a_pod_that_could_not_answer() -> None:
    runs = [ProbeRun("p0", error="the pod is gone"), ok("sa-token=present\n", "p1")]
    assert decide_exec_probe(TOKEN, runs).outcome is Outcome.FAIL


def test_no_running_pod_is_skipped_with_the_fix() -> None:
    result = decide_exec_probe(ENV, [])
    assert result.outcome is Outcome.SKIPPED
    assert "no Running agent pod" in result.why


def test_running_pods_keeps_only_running_pods_not_being_deleted() -> None:
    pods = [
        {"metadata": {"name": "a"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "b"}, "status": {"phase": "Succeeded"}},
        {"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "d"}},
    ]
    assert [p["metadata"]["name"] for p in checks.running_pods(pods)] == ["a"]


def test_probe_command_is_sh_c_and_quotes_the_egress_url() -> None:
    argv = checks.probe_command(EGRESS, egress_url="http://x/'; rm -rf /")
    assert argv[:2] == ("sh", "-c")
    assert "'http://x/'\"'\"'; rm -rf /'" in argv[2]
    assert checks.EGRESS_PROBE_URL in checks.probe_command(EGRESS)[2]
    assert "{url}" not in checks.probe_command(TOKEN)[2]


@pytest.mark.parametrize("answer", ["proxy=000\n", "proxy=no-client\n", "proxy=\n"])
def test_a_proxy_that_did_not_answer_from_the_pod_is_skipped_never_passed(answer: str) -> None:
    assert decide_exec_probe(PROXY, [ok(answer)]).outcome is Outcome.SKIPPED


def test_the_proxy_probe_runs_only_with_the_auth_proxy_and_sends_the_unknown_token() -> None:
    assert PROXY in checks.exec_probes(auth_proxy=True)
    assert PROXY not in checks.exec_probes(auth_proxy=False)
    script = checks.probe_command(PROXY)[2]
    assert f"Authorization: Bearer {checks.UNKNOWN_TOKEN}" in script
    assert '"$u/v1/messages"' in script
