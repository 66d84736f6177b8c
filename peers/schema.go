package peers

// This file holds the registry's memdb schema.

import memdb "github.com/hashicorp/go-memdb"

// Table and index names of the registry's memdb.
const (
	tablePeers = "peers"
	indexID    = "id"
	indexState = "state"
	indexType  = "type"
	indexOrder = "order"
)

// row is the memdb record of a peer, and the truth about its liveness.
// Rows are never modified after insert: a change copies the row, gives it a
// new liveness and inserts it (so watchers see every change). State is the
// liveness's state as a word, for the index ("all dead parents" is an
// index lookup); it is written with Live, never apart from it.
type row struct {
	Name  string
	Order int
	Type  string
	State string
	Live  *liveness
	Peer  *Peer
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tablePeers: peersTableSchema(),
	}}
}

func peersTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: tablePeers,
		Indexes: map[string]*memdb.IndexSchema{
			indexID:    {Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			indexState: {Name: indexState, Indexer: &memdb.StringFieldIndex{Field: "State"}},
			indexType:  {Name: indexType, Indexer: &memdb.StringFieldIndex{Field: "Type"}},
			indexOrder: {Name: indexOrder, Unique: true, Indexer: &memdb.IntFieldIndex{Field: "Order"}},
		},
	}
}
