#!/usr/bin/env python3
"""launches.py IN.cu OUT.cc - rewrite each kernel launch for cuemu.h:
k<T><<<cfg>>>(args) -> k<T> % cuemu::cfg(cfg).named("k<T>")(args), so
the emulation can name the kernel in what it reports."""
import re
import sys

LAUNCH = re.compile(r'(\b[A-Za-z_]\w*(?:<[^<>;()]*>)?)<<<(.*?)>>>\(')

src = open(sys.argv[1]).read()
out, n = LAUNCH.subn(lambda m: '%s %% cuemu::cfg(%s).named("%s")(' % (m.group(1), m.group(2), m.group(1)), src)
if '<<<' in out:
    sys.exit('%s: a launch the rewrite did not understand' % sys.argv[1])
open(sys.argv[2], 'w').write('#line 1 "%s"\n' % sys.argv[1] + out)
