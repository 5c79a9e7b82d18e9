module github.com/holdfast-dev/holdfast/clients/go

go 1.26
