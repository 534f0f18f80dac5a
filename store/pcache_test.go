package store

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Random inserts and deletes split and merge B-tree pages in every order,
// so balances swap page numbers (through the wrapper) many times; the file
// must stay intact and hold exactly what was written, with a cache large
// enough to hold everything and with one small enough to evict.
func TestPageCacheWrapperKeepsFilesIntact(t *testing.T) {
	require.True(t, pcacheWrapped, "the page cache wrapper is installed at package init")
	for _, cache := range []int{-8192, 20} {
		t.Run(fmt.Sprint("cache_size=", cache), func(t *testing.T) {
			db, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "p.db")+
				fmt.Sprintf("?_journal_mode=WAL&_cache_size=%d", cache))
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			db.SetMaxOpenConns(1)
			_, err = db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID;
CREATE TABLE r (id INTEGER PRIMARY KEY, k TEXT NOT NULL); CREATE INDEX r_k ON r (k)`)
			require.NoError(t, err)
			parks0 := pcacheParks()
			rng := rand.New(rand.NewPCG(1, uint64(cache+100000)))
			want := map[string]bool{}
			for batch := range 60 {
				tx, err := db.Begin()
				require.NoError(t, err)
				for range 200 {
					k := fmt.Sprintf("%016x", rng.Uint64())
					_, err := tx.Exec(`INSERT INTO t (k, v) VALUES (?, zeroblob(?))`, k, 20+rng.IntN(200))
					require.NoError(t, err)
					_, err = tx.Exec(`INSERT INTO r (k) VALUES (?)`, k)
					require.NoError(t, err)
					want[k] = true
				}
				if batch%3 == 2 { // take a random third out again
					n := 0
					for k := range want {
						if n++; n%3 != 0 {
							continue
						}
						_, err := tx.Exec(`DELETE FROM t WHERE k = ?`, k)
						require.NoError(t, err)
						_, err = tx.Exec(`DELETE FROM r WHERE k = ?`, k)
						require.NoError(t, err)
						delete(want, k)
					}
				}
				if batch%10 == 9 {
					require.NoError(t, tx.Rollback()) // a rolled-back batch leaves nothing
					for k := range want {
						delete(want, k)
					}
					rows, err := db.Query(`SELECT k FROM t`)
					require.NoError(t, err)
					for rows.Next() {
						var k string
						require.NoError(t, rows.Scan(&k))
						want[k] = true
					}
					require.NoError(t, rows.Err())
					continue
				}
				require.NoError(t, tx.Commit())
			}
			var check string
			require.NoError(t, db.QueryRow(`PRAGMA integrity_check`).Scan(&check))
			require.Equal(t, "ok", check)
			var n, nr int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM t`).Scan(&n))
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM r`).Scan(&nr))
			require.Equal(t, len(want), n)
			require.Equal(t, len(want), nr)
			var missing int
			for k := range want {
				var got string
				if err := db.QueryRow(`SELECT k FROM r INDEXED BY r_k WHERE k = ?`, k).Scan(&got); err != nil {
					missing++
				}
			}
			require.Zero(t, missing, "every key is found through the index")
			require.Greater(t, pcacheParks(), parks0, "balances swapped pages through the wrapper")
		})
	}
}
