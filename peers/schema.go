package peers

import memdb "github.com/hashicorp/go-memdb"

// Table and index names of the registry's memdb.
const (
	tablePeers = "peers"
	indexID    = "id"
	indexState = "state"
	indexType  = "type"
	indexOrder = "order"
)

// row is the memdb record of a peer. Rows are never modified after insert:
// a change copies the row, edits the copy and inserts it. The indexed words
// mirror the handle's atomics at the last transition so that queries such as
// "all dead parents" are index lookups and watchers see every change.
type row struct {
	Name  string
	Order int
	Type  string
	State string
	Admin string
	// Suspect mirrors Peer.Suspect at the last change, so that a peer
	// turning suspect wakes watchers (the prober settles it by probing).
	Suspect bool
	Peer    *Peer
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
