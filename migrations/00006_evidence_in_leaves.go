package migrations

import (
	"context"
	"database/sql"
)

// Migration 6: the evidence projection moves from its own table
// (evidence_index, one more B-tree row per appended record, plus three
// indexes) into nullable columns of the leaves row that holds the record.
// An appended evidence record then costs one table row instead of two;
// that row was the largest remaining share of the writer on the
// batched-ingest benchmark (BENCHMARKS.md). The indexes stay what they
// were, plus one that only records that did not pass enter: with fewer,
// commit-only filters would sort and rare-status filters would scan the
// leaf bodies.
//
//	backend, status, repository, commit_id
//	    the record's backend, status, subject repository and source commit
//	    for evidence leaves; NULL for every other kind (`ledger audit`
//	    checks both). The lane is the leaf's key column already.
//	evidence_lane         (key, idx)             lane filters, newest first
//	evidence_commit       (commit_id, idx)       commit (exact or prefix)
//	evidence_lane_commit  (key, commit_id, idx)  lane + commit (the gates'
//	                                             query)
//	evidence_unpassed     (status, idx)          statuses other than passed
//	                                             (rare, so a scan for them
//	                                             would read the whole log)
//
// The indexes are partial (kind = 'evidence'; evidence_unpassed also
// status <> 'passed', so passing records, the bulk, cost it nothing). The
// first three are the indexes evidence_index had. The projection's control,
// tree_id, dirty and its copies of the lane and recorded_at are dropped:
// no query used them, and the leaf row and body hold them.
//
// The leaves table is rebuilt (as in migration 5): every row is copied with
// its leaf bytes, hash and index unchanged, so the log and its signed
// checkpoints stay valid. On a 1,000,000-leaf log this takes about as long
// as migration 5 (BENCHMARKS.md).
var up6Stmts = []string{
	`CREATE TABLE leaves_v6 (
    idx         INTEGER PRIMARY KEY,          -- 0-based leaf index
    id          TEXT    NOT NULL,             -- content id (ledger.EntryID); looked up through entry_ids/recent_ids
    kind        TEXT    NOT NULL,
    key         TEXT    NOT NULL DEFAULT '',  -- ledger.EntryKey
    recorded_at INTEGER NOT NULL,             -- unix nanoseconds, UTC
    leaf        BLOB    NOT NULL,
    leaf_hash   BLOB    NOT NULL,
    -- evidence projection (NULL unless kind = 'evidence'; the lane is key)
    backend     TEXT,
    status      TEXT,
    repository  TEXT,
    commit_id   TEXT
) STRICT`,
	`INSERT INTO leaves_v6(idx, id, kind, key, recorded_at, leaf, leaf_hash, backend, status, repository, commit_id)
    SELECT l.idx, l.id, l.kind, l.key, l.recorded_at, l.leaf, l.leaf_hash, e.backend, e.status, e.repository, e.commit_id
    FROM leaves l LEFT JOIN evidence_index e ON e.idx = l.idx ORDER BY l.idx`,
	`DROP TABLE evidence_index`,
	`DROP TABLE leaves`,
	`ALTER TABLE leaves_v6 RENAME TO leaves`,
	`CREATE INDEX leaves_kind_key ON leaves(kind, key, idx) WHERE kind <> 'evidence'`,
	`CREATE INDEX evidence_lane ON leaves(key, idx) WHERE kind = 'evidence'`,
	`CREATE INDEX evidence_commit ON leaves(commit_id, idx) WHERE kind = 'evidence'`,
	`CREATE INDEX evidence_lane_commit ON leaves(key, commit_id, idx) WHERE kind = 'evidence'`,
	`CREATE INDEX evidence_unpassed ON leaves(status, idx) WHERE kind = 'evidence' AND status <> 'passed'`,
}

// down6Stmts restore schema 5; the dropped projection columns are read
// back from the leaf bodies.
var down6Stmts = []string{
	`CREATE TABLE evidence_index (
    idx         INTEGER PRIMARY KEY REFERENCES leaves(idx),
    lane        TEXT    NOT NULL,
    backend     TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    control     TEXT    NOT NULL,
    repository  TEXT    NOT NULL,
    commit_id   TEXT    NOT NULL,
    tree_id     TEXT    NOT NULL,
    dirty       INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL
) STRICT`,
	`INSERT INTO evidence_index(idx, lane, backend, status, control, repository, commit_id, tree_id, dirty, recorded_at)
    SELECT idx, key, backend, status,
        COALESCE(json_extract(CAST(leaf AS TEXT), '$.body.control'), ''), repository, commit_id,
        COALESCE(json_extract(CAST(leaf AS TEXT), '$.body.subject.tree'), ''),
        COALESCE(json_extract(CAST(leaf AS TEXT), '$.body.subject.dirty'), 0), recorded_at
    FROM leaves WHERE kind = 'evidence' ORDER BY idx`,
	`CREATE TABLE leaves_v5 (
    idx         INTEGER PRIMARY KEY,
    id          TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    key         TEXT    NOT NULL DEFAULT '',
    recorded_at INTEGER NOT NULL,
    leaf        BLOB    NOT NULL,
    leaf_hash   BLOB    NOT NULL
) STRICT`,
	`INSERT INTO leaves_v5 SELECT idx, id, kind, key, recorded_at, leaf, leaf_hash FROM leaves ORDER BY idx`,
	`DROP TABLE leaves`,
	`ALTER TABLE leaves_v5 RENAME TO leaves`,
	`CREATE INDEX leaves_kind_key ON leaves(kind, key, idx) WHERE kind <> 'evidence'`,
	`CREATE INDEX evidence_lane ON evidence_index(lane, idx)`,
	`CREATE INDEX evidence_commit ON evidence_index(commit_id, idx)`,
	`CREATE INDEX evidence_lane_commit ON evidence_index(lane, commit_id, idx)`,
}

func up6(ctx context.Context, db *sql.DB) error {
	return rebuild(ctx, db, "evidence_index", false, up6Stmts)
}

func down6(ctx context.Context, db *sql.DB) error {
	return rebuild(ctx, db, "evidence_index", true, down6Stmts)
}
