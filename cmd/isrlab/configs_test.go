package main

import (
	"strings"
	"testing"
)

func TestParseScramConfigs(t *testing.T) {
	got, err := parseScramConfigs("SCRAM-SHA-256=[iterations=8192,password=a,s3cret-tail]")
	if err == nil || strings.Contains(err.Error(), "s3cret-tail") {
		t.Fatalf("a password with a comma in it: %+v, %v", got, err)
	}
	got, err = parseScramConfigs("SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=p=q]")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].mechanism != "SCRAM-SHA-256" || got[0].iterations != 8192 || got[0].password != "alice-secret" ||
		got[1].mechanism != "SCRAM-SHA-512" || got[1].iterations != 4096 || got[1].password != "p=q" {
		t.Fatalf("%+v", got)
	}
	for _, bad := range []string{
		"SCRAM-SHA-1=[password=s3cret-value]",
		"SCRAM-SHA-512=[iterations=100,password=s3cret-value]",
		"SCRAM-SHA-512=[password=s3cret-value",
		"SCRAM-SHA-512=[iterations=4096]",
		"SCRAM-SHA-512=[salt=x,password=s3cret-value]",
	} {
		_, err := parseScramConfigs(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "s3cret-value") {
			t.Errorf("%q: the error shows the password: %v", bad, err)
		}
	}
}
