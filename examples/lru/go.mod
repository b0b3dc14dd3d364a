module example.com/loadout-policies/lru

go 1.26.8

require github.com/loadout-dev/loadout/sdk v0.0.0-00010101000000-000000000000

require (
	github.com/go-json-experiment/json v1.27.2 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

// Outside this repository, require a released SDK version instead.
replace github.com/loadout-dev/loadout/sdk => ../../sdk
