"""A shared campaign's Redis keys hold whatever any machine (or anyone with the URL) wrote there.
Against a real ``redis-server`` holding a real campaign, each kind of hostile or garbage value is
written into one key, then:

- ``aliasfuzz report redis://.../NAME --out DIR`` exits 2 with one line naming the key and the
  field, leaves no folder (not even a hidden one beside DIR), and a retry once the value is
  repaired writes the campaign to the same DIR;
- a machine joining the campaign checks the stored configuration as its own command line's
  options are (``options.option_problem``, one check for both, the resume's too): one line, exit 2,
  nothing written.

And ``--campaign ''`` is refused, and the same targets in another order are the same campaign.
The findings come from the TEST DOUBLE fake probe (tests/e2e/test_campaign.py ``fake_probe_dir``),
which stands in for no framework."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.support.fake_targets import fake_probe_dir

NAME = "hostile"
P = f"aliasfuzz:campaign:{NAME}:"


@pytest.fixture(scope="module")
def campaign(module_redis_server, tmp_path_factory):
    """A finished campaign with findings in Redis: ``(url, client, its keys as DUMPs, env, tmp)``."""
    import redis

    url = module_redis_server[0]
    tmp = tmp_path_factory.mktemp("hostile")
    env = fake_probe_dir(tmp)
    r = run_cli(
        "fuzz",
        "--db",
        url,
        "--campaign",
        NAME,
        "--targets",
        "candle",
        "--profile",
        "quick",
        "--seed",
        "1",
        "--max-programs",
        "16",
        "--chunk-size",
        "8",
        "--shrink-time",
        "2",
        "--confirm",
        "0",
        "--no-report",
        "--out",
        str(tmp / "machine"),
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr  # the fake probe's planted divergences
    client = redis.Redis.from_url(url)
    keys = {k: client.dump(k) for k in client.scan_iter(P + "*")}
    assert P.encode() + b"findings" in keys and P.encode() + b"order" in keys
    return url, client, keys, env, tmp


def aliasfuzz(capsys, *args: str) -> tuple[int, str, str]:
    """The real command line run in this process, for the many cases below that end before any
    target starts (no interpreter start for each): ``(exit status, stdout, stderr)``."""
    from harness.cli import main

    capsys.readouterr()
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def restore(client, keys) -> None:
    for k in client.scan_iter(P + "*"):
        client.delete(k)
    for k, v in keys.items():
        client.restore(k, 0, v)


def set_config(**fields):
    def mutate(c):
        c.set(P + "config", json.dumps({**json.loads(c.get(P + "config")), **fields}))

    return mutate


def set_entry(change):
    """Changes the first stored finding's entry (``change(entry) -> entry``)."""

    def mutate(c):
        sig = c.lrange(P + "order", 0, -1)[0]
        c.hset(P + "findings", sig, json.dumps(change(json.loads(c.hget(P + "findings", sig)))))

    return mutate


def list_config(c):
    c.delete(P + "config")
    c.rpush(P + "config", "x")


# kind -> (what is written, the key named, then the field named (None: the key alone))
HOSTILE = {
    "config not JSON": (lambda c: c.set(P + "config", "{seed"), "config", None),
    "config a list": (lambda c: c.set(P + "config", "[]"), "config", None),
    "config a Redis list": (list_config, "config", None),
    "chunk size 0": (set_config(chunk_size=0), "config", "field chunk_size"),
    "chunk size -64": (set_config(chunk_size=-64), "config", "field chunk_size"),
    "chunk size over the maximum": (set_config(chunk_size=1025), "config", "field chunk_size"),
    "budget -5": (set_config(budget_s=-5), "config", "field budget_s"),
    "metamorphic share 2.0": (set_config(metamorphic_share=2.0), "config", "field metamorphic_share"),
    "seed a string": (set_config(seed="eleven"), "config", "field seed"),
    "unknown profile": (set_config(profile="nightmare"), "config", "field profile"),
    "targets a string": (set_config(targets="candle"), "config", "field targets"),
    "no end": (set_config(budget_s=None, max_programs=None), "config", "fields budget_s and max_programs"),
    "counter not a number": (lambda c: c.set(P + "counter", "many"), "counter", None),
    "programs negative": (lambda c: c.set(P + "programs", "-3"), "programs", None),
    "done beyond the counter": (lambda c: c.setbit(P + "done", 1000, 1), "done", None),
    "pending not a chunk": (lambda c: c.zadd(P + "pending", {"xyz": 1}), "pending", "field xyz"),
    "reissued not a chunk": (lambda c: c.hset(P + "reissued", "zz", 1), "reissued", "field zz"),
    "machine programs not a count": (
        lambda c: c.hset(P + "machine_programs", "m", "1.5"),
        "machine_programs",
        "field m",
    ),
    # A pushed item's number (from 0) is the list's length before it: {order}, {shrink_log}.
    "order names no finding": (lambda c: c.rpush(P + "order", "nosuch"), "order", "field item {order}"),
    "finding not JSON": (set_entry(lambda e: "{"), "findings", "field device|"),
    "finding without a record": (set_entry(lambda e: {**e, "record": None}), "findings", "field device|"),
    "finding of another signature": (
        set_entry(lambda e: {**e, "record": {**e["record"], "signature": "other"}}),
        "findings",
        "field device|",
    ),
    "finding case not text": (set_entry(lambda e: {**e, "minimized": 5}), "findings", "field device|"),
    "finding status a number": (
        set_entry(lambda e: {**e, "record": {**e["record"], "status": 3}}),
        "findings",
        "field device|",
    ),
    "shrink log not JSON": (lambda c: c.rpush(P + "shrink_log", "nope"), "shrink_log", "field item {shrink_log}"),
    "sightings not a count": (lambda c: c.hset(P + "sightings", "s", "x"), "sightings", "field s"),
    "target info a list": (lambda c: c.hset(P + "targets", "t", "[1]"), "targets", "field t"),
    "unavailable not UTF-8": (lambda c: c.hset(P + "unavailable", "fw", b"\xff"), "unavailable", "field fw"),
    "started past year 9999": (lambda c: c.set(P + "started", "1e20"), "started", None),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_report_of_a_hostile_value_is_one_line_leaves_no_folder_and_a_retry_works(campaign, kind, capsys):
    url, client, keys, _env, tmp = campaign
    mutate, key, field = HOSTILE[kind]
    parent = tmp / kind.replace(" ", "-")
    parent.mkdir()
    out = parent / "merged"
    restore(client, keys)
    if field:
        field = field.format(order=client.llen(P + "order"), shrink_log=client.llen(P + "shrink_log"))
    mutate(client)
    try:
        status, stdout, stderr = aliasfuzz(capsys, "report", f"{url}/{NAME}", "--out", str(out))
    finally:
        restore(client, keys)
    assert status == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, lines
    named = f"key {P}{key}" + (f", {field}" if field else ":")
    assert named in lines[0], (named, lines[0])
    assert list(parent.iterdir()) == []  # neither DIR nor a hidden folder beside it
    # Repaired, the same command writes the campaign into the same DIR.
    status, stdout, stderr = aliasfuzz(capsys, "report", f"{url}/{NAME}", "--out", str(out))
    assert status == 0, stdout + stderr
    assert (out / "report.md").is_file() and len(json.loads((out / "findings.json").read_text())) == client.llen(
        P + "order"
    )
    assert [p.name for p in parent.iterdir()] == ["merged"]


# field -> (a hostile value stored in Redis, the same value on the command line, its flag)
JOINING = {
    # 1025: one over options.MAX_CHUNK_SIZE, the one bound of the command line, a resume and Redis.
    "chunk_size": [(0, "0", "--chunk-size"), (-64, "-64", "--chunk-size"), (1025, "1025", "--chunk-size")],
    "metamorphic_share": [(2.0, "2.0", "--metamorphic")],
    "budget_s": [(-5, None, "--budget")],
    "seed": [("eleven", None, "--seed")],
}


@pytest.mark.parametrize("field, stored, given, flag", [(f, *v) for f, values in JOINING.items() for v in values])
def test_a_joining_machine_checks_the_stored_config_as_its_command_line(
    module_redis_server, tmp_path, capsys, field, stored, given, flag
):
    import redis

    url = module_redis_server[0]
    name = f"join-{field}-{abs(hash(repr(stored))) % 1000}"
    config = {
        "seed": 1,
        "profile": "quick",
        "targets": ["candle"],
        "chunk_size": 8,
        "budget_s": 3.0,
        "max_programs": None,
        "metamorphic_share": 0.25,
        field: stored,
    }
    redis.Redis.from_url(url).set(f"aliasfuzz:campaign:{name}:config", json.dumps(config))
    env = fake_probe_dir(tmp_path)
    out = tmp_path / "machine"
    # With chunk size 0 a machine used to idle its whole budget and exit 0: it stops at once now.
    r = run_cli("fuzz", "--db", url, "--campaign", name, "--no-report", "--out", str(out), env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"key aliasfuzz:campaign:{name}:config, field {field}: " in lines[0], lines
    assert r.stdout == "" and not out.exists()
    if given is None:
        return
    # The same value on the command line is refused by the same check, in the same words.
    from harness.fuzzing.options import option_problem

    problem = option_problem(field, stored)
    assert problem and lines[0].endswith(f"field {field}: {problem}, found {json.dumps(stored)}"), lines[0]
    status, _stdout, stderr = aliasfuzz(
        capsys, "fuzz", "--targets", "candle", "--max-programs", "8", flag, given, "--out", str(out)
    )
    assert status == 2 and stderr.strip() == f"aliasfuzz: {flag} {given}: {problem}", stderr
    assert not out.exists()


def test_an_empty_campaign_name_is_refused(module_redis_server, tmp_path):
    out = tmp_path / "machine"
    r = run_cli(
        "fuzz",
        "--db",
        module_redis_server[0],
        "--campaign",
        "",
        "--targets",
        "candle",
        "--max-programs",
        "8",
        "--out",
        str(out),
        env=fake_probe_dir(tmp_path),
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aliasfuzz: --campaign '': a campaign name is"), lines
    assert not out.exists()


def test_the_same_targets_in_another_order_are_the_same_campaign(module_redis_server, tmp_path):
    url = module_redis_server[0]
    env = fake_probe_dir(tmp_path)
    common = ("fuzz", "--db", url, "--campaign", "order", "--no-report", "--confirm", "0", "--shrink-time", "2")
    first = tmp_path / "first"
    r = run_cli(
        *common,
        "--targets",
        "candle:ref,candle:planted",
        "--seed",
        "3",
        "--max-programs",
        "8",
        "--chunk-size",
        "8",
        "--out",
        str(first),
        env=env,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    second = tmp_path / "second"
    r = run_cli(*common, "--targets", "candle:planted,candle:ref,candle:planted", "--out", str(second), env=env)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    # A resume of the first machine's folder, its targets given in another order: the same campaign.
    r = run_cli("fuzz", "--resume", str(first), "--targets", "candle:planted,candle:ref", "--no-report", env=env)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    # Other targets are still another campaign.
    r = run_cli(*common, "--targets", "candle:ref", "--out", str(tmp_path / "third"), env=env)
    assert r.returncode == 2 and "--targets candle:ref: campaign order has targets" in r.stderr, r.stderr
