package witness_test

import (
	"testing"

	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

func TestMain(m *testing.M) { witnesstest.Main(m) }
