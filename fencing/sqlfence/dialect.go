package sqlfence

import (
	"fmt"
	"strings"
)

// Dialect is the SQL dialect of a database: it decides the fence table's DDL
// and the statement that raises the fence. The zero Dialect is none: New
// refuses it.
type Dialect int

const (
	// PostgreSQL is PostgreSQL 9.5 or later (INSERT ... ON CONFLICT), with
	// any driver that takes $1-style placeholders (pgx's stdlib, lib/pq).
	PostgreSQL Dialect = iota + 1
	// SQLite is SQLite 3.35 or later (upsert with RETURNING), with any
	// driver that takes ?-style placeholders (modernc.org/sqlite,
	// mattn/go-sqlite3).
	SQLite
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "PostgreSQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// statements are one table's SQL in one dialect. Placeholders: name,
// cluster, revision in that order.
type statements struct {
	create []string // run in order, in one transaction, by Migrate
	bump   string   // the common case, an existing row of the same cluster: an update that matches only to raise (or keep) it
	raise  string   // the upsert: returns a row only when it raised (or kept) the fence
	read   string   // the row of one name: cluster, revision
	reset  string   // set a name's row to (cluster, 0)
	lock   string   // PostgreSQL only: serialises concurrent Migrates
}

// ddl is the fence table, the same columns in both dialects. The cluster is
// the etcd cluster ID in hex, as etcd prints it, so an operator reads it as
// etcdctl shows it; revision 0 is a row Reset adopted for a cluster.
func (d Dialect) statements(name string) (statements, bool) {
	table := quote(name)
	switch d {
	case PostgreSQL:
		return statements{
			lock: "SELECT pg_advisory_xact_lock(hashtext($1))",
			create: []string{`CREATE TABLE IF NOT EXISTS ` + table + ` (
	name     text   PRIMARY KEY,
	cluster  text   NOT NULL,
	revision bigint NOT NULL CHECK (revision >= 0)
)`},
			// An UPDATE that waited for the row's lock re-checks its WHERE on
			// the newest committed version (READ COMMITTED), so it never
			// raises past a newer token committed meanwhile.
			bump: `UPDATE ` + table + ` SET revision = $3 WHERE name = $1 AND cluster = $2 AND revision <= $3`,
			// ON CONFLICT locks the conflicting row even when its WHERE is
			// false, and under READ COMMITTED it sees the row's newest
			// committed version, not the snapshot's.
			raise: `INSERT INTO ` + table + ` AS f (name, cluster, revision) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET revision = EXCLUDED.revision
WHERE f.cluster = EXCLUDED.cluster AND f.revision <= EXCLUDED.revision
RETURNING revision`,
			read: `SELECT cluster, revision FROM ` + table + ` WHERE name = $1`,
			reset: `INSERT INTO ` + table + ` AS f (name, cluster, revision) VALUES ($1, $2, 0)
ON CONFLICT (name) DO UPDATE SET cluster = EXCLUDED.cluster, revision = 0 WHERE f.cluster <> EXCLUDED.cluster`,
		}, true
	case SQLite:
		return statements{
			create: []string{`CREATE TABLE IF NOT EXISTS ` + table + ` (
	name     TEXT    PRIMARY KEY NOT NULL,
	cluster  TEXT    NOT NULL,
	revision INTEGER NOT NULL CHECK (revision >= 0)
)`},
			bump: `UPDATE ` + table + ` SET revision = ?3 WHERE name = ?1 AND cluster = ?2 AND revision <= ?3`,
			raise: `INSERT INTO ` + table + ` (name, cluster, revision) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET revision = excluded.revision
WHERE cluster = excluded.cluster AND revision <= excluded.revision
RETURNING revision`,
			read: `SELECT cluster, revision FROM ` + table + ` WHERE name = ?`,
			reset: `INSERT INTO ` + table + ` (name, cluster, revision) VALUES (?, ?, 0)
ON CONFLICT (name) DO UPDATE SET cluster = excluded.cluster, revision = 0 WHERE cluster <> excluded.cluster`,
		}, true
	}
	return statements{}, false
}

// quote quotes each part of a valid table name, so that a name that is also
// an SQL keyword ("order", "user") is a table all the same; a lower-case
// name means the same quoted or not.
func quote(table string) string {
	parts := strings.Split(table, ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, ".")
}

// validTable reports whether table is a lower-case SQL identifier, qualified
// by a schema ("ops.fences") only in PostgreSQL. In SQLite a qualified name
// is a table of an ATTACHed database file, and SQLite commits across files
// are not atomic in WAL mode: after a crash the caller's writes could stand
// without the fence's raise. So SQLite's fence lives in the main database.
func validTable(d Dialect, table string) bool {
	parts := strings.Split(table, ".")
	if len(parts) > 2 || len(parts) == 2 && d != PostgreSQL {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 63 || ('0' <= p[0] && p[0] <= '9') {
			return false
		}
		for _, c := range []byte(p) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
				return false
			}
		}
	}
	return true
}
