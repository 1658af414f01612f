package credits_test

import (
	"testing"

	"github.com/tollgatehq/tollgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
