package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one embedded schema step.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations. Files are named
// "NNNN_description.sql"; versions start at 1 and have no gaps.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names {
		base := path.Base(name)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number and '_'", base)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d (no gaps or duplicates)", m.name, m.version, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int {
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		return 0
	}
	return len(ms)
}

// migrate brings the database on conn up to the newest embedded version.
// All pending migrations run in one immediate transaction together with the
// PRAGMA user_version update, so a failure leaves the schema unchanged. An
// up-to-date database is left alone; a newer one is an error.
func migrate(ctx context.Context, conn *sql.Conn, log *slog.Logger) error {
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil) // _txlock=immediate: takes the write lock
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var cur int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&cur); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	switch {
	case cur > len(ms):
		return fmt.Errorf("%w: database is at version %d, this build knows up to %d", ErrSchemaTooNew, cur, len(ms))
	case cur == len(ms):
		return nil
	}
	for _, m := range ms[cur:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate %s: %w", m.name, err)
		}
		log.Info("store: migration applied", "migration", m.name, "version", m.version)
	}
	// A migration may edit sqlite_schema directly (0009 does): SQLite
	// notices such a change in other connections only by the schema
	// cookie, which an UPDATE of sqlite_schema leaves alone. Increasing it
	// after any migration is harmless: connections reload their schema.
	var cookie int64
	if err := tx.QueryRowContext(ctx, "PRAGMA schema_version").Scan(&cookie); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "PRAGMA schema_version = "+strconv.FormatInt(cookie+1, 10)); err != nil {
		return fmt.Errorf("migrate: set schema version: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(len(ms))); err != nil {
		return fmt.Errorf("migrate: set version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
