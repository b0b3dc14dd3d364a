module github.com/loadout-dev/loadout/sdk

go 1.26.8
