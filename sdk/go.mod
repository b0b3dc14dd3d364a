module github.com/loadout-dev/loadout/sdk

go 1.26.8

require gopkg.in/yaml.v3 v3.0.1

require github.com/go-json-experiment/json v1.27.2
