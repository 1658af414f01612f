package credentials

// KeysRefreshed counts the keys read again ahead of their expiry.
func (s *Service) KeysRefreshed() int64 { return s.refreshed.Load() }
