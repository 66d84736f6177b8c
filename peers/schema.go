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
