// Package proto holds the wire protocol between the loadout host and its
// backend plugins: backend.proto and the Go code protoc generates from it.
// Backend authors use package plugins instead; only plugins imports this.
package proto

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative backend.proto
