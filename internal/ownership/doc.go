// Package ownership holds the test that keeps every table behind its owner:
// each package's SQL names only the tables the owners table of
// docs/development.md gives it. The package has no code of its own.
package ownership
