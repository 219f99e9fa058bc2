"""The corpus: a Hypothesis example database of the programs that showed new findings, local (a
directory) or shared between machines (Redis)."""

from __future__ import annotations

from .errors import CampaignError
from .ir import Program
from .run_folder import RunFolder, program_from_bytes, program_to_bytes

CORPUS_KEY = b"aliasfuzz/corpus/v1"




def open_database(spec: str | None, folder: RunFolder):
    from hypothesis.database import DirectoryBasedExampleDatabase

    if spec and spec.startswith("redis://"):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError as e:  # pragma: no cover - redis is a pinned dependency
            raise CampaignError(f"--db {spec}: the redis package is missing ({e})") from None
        client = redis.Redis.from_url(spec)
        try:
            client.ping()
        except Exception as e:
            raise CampaignError(f"--db {spec}: cannot reach Redis ({e})") from None
        return RedisExampleDatabase(client, key_prefix=b"aliasfuzz:")
    return DirectoryBasedExampleDatabase(spec or str(folder.path / "corpus"))


def load_corpus(db) -> list[Program]:
    out = []
    for raw in db.fetch(CORPUS_KEY):
        try:
            out.append(program_from_bytes(raw))
        except Exception:
            continue  # an entry from another format version: skip it, never fail the campaign
    return out


def store_corpus(db, *cases_toml: str) -> None:
    import tomllib

    from .ir import parse_case

    for text in cases_toml:
        try:
            db.save(CORPUS_KEY, program_to_bytes(parse_case(tomllib.loads(text))))
        except Exception:
            pass


