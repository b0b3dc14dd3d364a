// Package proto holds the wire protocol between the loadout host and its
// backend plugins: backend.proto and the Go code protoc generates from it.
// Backend authors use package plugins instead; only plugins imports this.
package proto

// The generated files are committed (CI does not regenerate them). They were
// generated with protoc 3.21.12 (Debian's protobuf-compiler),
// protoc-gen-go v1.36.12 (google.golang.org/protobuf, the version go.mod
// requires) and protoc-gen-go-grpc v1.6.2:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./plugins/proto
//
//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative backend.proto
