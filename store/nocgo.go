//go:build !cgo

package store

// Without cgo there is no SQLite to open: go-sqlite3 compiles SQLite's C
// source into the binary. This file turns the build's failure into a
// sentence that says so, and keeps it the only error of the package.

// needsCgo does not compile, on purpose: the compiler quotes the sentence.
const needsCgo = int("package store needs cgo: SQLite is compiled in through github.com/mattn/go-sqlite3; build with CGO_ENABLED=1 and a C compiler")

// walVFS and registerWALVFS stand in for walbuf.go's, so that no other
// error hides the one above.
const walVFS = "persona-walbuf"

func registerWALVFS() error { return nil }

func walWrites() (requested, issued int64) { return 0, 0 }
