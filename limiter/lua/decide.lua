{{decide_func}}
return decide(KEYS, ARGV)
