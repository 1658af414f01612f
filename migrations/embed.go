// Package migrations holds the goose SQL migrations of Tollgate's schema,
// embedded so that the binaries migrate without files on disk.
//
// Version 2 once ran River's migrations; it is now a no-op registered by
// internal/postgres (River migrates on its own line with rivermigrate), kept
// so that databases which recorded it agree with new ones. New SQL files
// take the next free number.
package migrations

import "embed"

// FS holds every *.sql migration.
//
//go:embed *.sql
var FS embed.FS
