package web

import (
	"testing"

	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
)

func TestMain(m *testing.M) { teststore.Main(m) }
