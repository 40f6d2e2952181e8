"""The layout of run.db. Bump SCHEMA_VERSION on any change a reader of the old layout would misread."""

from __future__ import annotations

#: 2: the loop state keeps its long texts by reference (the texts table), see RunStore.set_state.
#: The profiles table (one row per profiled candidate, RunStore.add_profile) came without a new version: a reader
#: that does not know it reads every other table unchanged, so older ksearch versions still read newer runs. A run
#: written before it gets it when it is opened for writing (CREATE TABLE IF NOT EXISTS); readers of such a run see
#: no profiles (queries.profiles).
SCHEMA_VERSION = 2

#: Every table a run database has; a database without them was not written by ksearch. (`texts`, added in
#: schema 2, and `profiles`, added in 3, are not among them: readers do without them, and an older run gets them
#: when it is resumed.)
TABLES = ("meta", "candidates", "evaluations", "world_models", "calls", "events")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL, created_at REAL NOT NULL, round INTEGER NOT NULL,
  node_id TEXT, parent_id TEXT, action_title TEXT, mode TEXT, params TEXT NOT NULL DEFAULT '{}',
  source_hash TEXT NOT NULL, normalized_hash TEXT NOT NULL, path TEXT NOT NULL, duplicate_of TEXT
);
CREATE TABLE IF NOT EXISTS evaluations (
  id INTEGER PRIMARY KEY AUTOINCREMENT, candidate_id TEXT NOT NULL REFERENCES candidates(id),
  eval_index INTEGER NOT NULL, created_at REAL NOT NULL, round INTEGER NOT NULL, kind TEXT NOT NULL,
  status TEXT NOT NULL, score REAL NOT NULL, holdout_score REAL, duration_s REAL, message TEXT,
  result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS world_models (
  id INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL, created_at REAL NOT NULL, reason TEXT,
  json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
  id INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, round INTEGER NOT NULL, role TEXT NOT NULL,
  model TEXT, prompt TEXT NOT NULL, response TEXT NOT NULL, tokens_in INTEGER, tokens_out INTEGER,
  latency_s REAL, cost_usd REAL, retries INTEGER, error TEXT
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, round INTEGER NOT NULL, kind TEXT NOT NULL,
  data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS texts (hash TEXT PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS profiles (
  id INTEGER PRIMARY KEY AUTOINCREMENT, candidate_id TEXT NOT NULL REFERENCES candidates(id),
  created_at REAL NOT NULL, round INTEGER NOT NULL, backend TEXT NOT NULL, workload TEXT NOT NULL,
  status TEXT NOT NULL, note TEXT, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS profiles_candidate ON profiles(candidate_id);
CREATE INDEX IF NOT EXISTS evaluations_candidate ON evaluations(candidate_id);
CREATE INDEX IF NOT EXISTS candidates_norm ON candidates(normalized_hash);
CREATE INDEX IF NOT EXISTS candidates_source ON candidates(source_hash);
"""
