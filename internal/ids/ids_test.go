package ids

import "testing"

func TestIsUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"3f2504e0-4f89-11d3-9a0c-0305e82c3301": true,
		"3F2504E0-4F89-11D3-9A0C-0305E82C3301": true,
		"3f2504e0-4f89-11d3-9a0c-0305e82c330":  false, // short
		"3f2504e04f8911d39a0c0305e82c3301":     false, // no dashes
		"3f2504e0-4f89-11d3-9a0c-0305e82c330g": false, // not hex
		"3f2504e0x4f89-11d3-9a0c-0305e82c3301": false, // dash misplaced
		"":                                     false,
		"' OR 1=1 --":                          false,
		"3f2504e0-4f89-11d3-9a0c-0305e82c33é":  false, // multibyte
	} {
		if got := IsUUID(s); got != want {
			t.Errorf("IsUUID(%q) = %v, want %v", s, got, want)
		}
	}
}
