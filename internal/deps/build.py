# The build jail's program: cellblockd runs it as the jail's script with
# the arguments TARGET MODE ... It refuses a TARGET that is not a
# site-packages directory of this interpreter (runs would not find the
# packages there), then becomes uv (MODE "uv": argv[3] is uv, the rest its
# arguments) or runs pip from the wheel on PYTHONPATH (MODE "pip").
import os, site, sys
target, mode = sys.argv[1], sys.argv[2]
if target not in site.getsitepackages():
    sys.exit("cellblock: %s is not a site-packages directory of this Python %s" % (target, site.getsitepackages()))
if mode == "uv":
    os.execv(sys.argv[3], sys.argv[3:])
import runpy
sys.argv = ["pip"] + sys.argv[3:]
runpy.run_module("pip", run_name="__main__", alter_sys=True)

