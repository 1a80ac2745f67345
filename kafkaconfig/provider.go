package kafkaconfig

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// FileConfigProvider is Kafka's file config provider (KIP-297): a value
// ${file:/path/to/file.properties:key} is key's value in that file. It
// keeps secrets such as SASL passwords out of the broker's own config
// file.
const FileConfigProvider = "org.apache.kafka.common.config.provider.FileConfigProvider"

var providerRef = regexp.MustCompile(`\$\{([A-Za-z0-9_.-]+):([^:}]*):([^}]*)\}`)

// resolveProviders replaces ${provider:path:key} references in every set
// value with what the named provider gives, as Kafka does when
// config.providers names the provider. A reference to a provider that
// is not configured stays as written (Kafka's behaviour).
func (c *Config) resolveProviders() error {
	providers := map[string]string{}
	for _, p := range c.List("config.providers") {
		providers[p] = ""
	}
	if _, ok := providers["file"]; ok {
		if cls := c.String("config.providers.file.class"); cls != FileConfigProvider {
			return &InvalidError{Key: "config.providers.file.class", Value: cls, Reason: "the file provider needs " + FileConfigProvider}
		}
	}
	if len(providers) == 0 {
		return nil
	}
	files := map[string]map[string]string{}
	for k := range c.set {
		v := c.values[k]
		if !strings.Contains(v, "${") {
			continue
		}
		var ferr error
		out := providerRef.ReplaceAllStringFunc(v, func(ref string) string {
			m := providerRef.FindStringSubmatch(ref)
			if _, ok := providers[m[1]]; !ok || m[1] != "file" {
				return ref
			}
			props, ok := files[m[2]]
			if !ok {
				var err error
				if props, err = readProperties(m[2]); err != nil {
					ferr = err
					return ref
				}
				files[m[2]] = props
			}
			val, ok := props[m[3]]
			if !ok {
				ferr = fmt.Errorf("key %s is not in %s", m[3], m[2])
				return ref
			}
			return val
		})
		if ferr != nil {
			// The error names the key and the file, never a value.
			return fmt.Errorf("configuration %s: file config provider: %w", k, ferr)
		}
		c.values[k] = out
	}
	return nil
}

func readProperties(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	props, err := ParseProperties(f)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range props {
		out[p.Key] = p.Value
	}
	return out, nil
}
