package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"

	"github.com/personakit/persona/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one embedded schema step.
type migration = migrations.Migration

// loadMigrations reads the embedded migrations.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	ms, err := migrations.Load(fsys, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("%w", err)
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
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		log.Info("store: migration applied", "migration", m.Name, "version", m.Version)
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
