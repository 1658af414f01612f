package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// ConstraintError turns a constraint violation into an error a client can
// act on, naming the field (fieldOf maps the constraint and column to the
// request's field name), so that a race lost on a unique index is a 409
// and a value a CHECK refuses a 400, not a 500. Other errors pass as they
// are.
func ConstraintError(err error, fieldOf func(constraint, column string) string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	field := fieldOf(pe.ConstraintName, pe.ColumnName)
	switch pe.Code {
	case "23505": // unique_violation
		return &apperr.Error{Code: apperr.Conflict, Message: field + " is already taken",
			Fields: []apperr.FieldError{{Field: field, Message: "already exists"}}}
	case "23503": // foreign_key_violation
		if strings.Contains(pe.ConstraintName, "plan") {
			field = "plan"
		}
		return apperr.Invalidf(field, "refers to something that does not exist")
	case "23514", "23502", "22001", "22003", "22P02", "22021": // check, not null, too long, out of range, bad text, bad encoding
		return apperr.Invalidf(field, "is not acceptable: %s", pe.Message)
	}
	return err
}

// errDryRun ends a dry run's transaction with a rollback.
var errDryRun = errors.New("postgres: dry run")

// DryRun runs fn in a transaction that is rolled back whatever fn returns:
// a preview that is the change itself, undone, so that it can never
// disagree with the change.
func DryRun(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errDryRun
	})
	if errors.Is(err, errDryRun) {
		return nil
	}
	return err
}
