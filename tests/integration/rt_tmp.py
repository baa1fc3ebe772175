import os, time, subprocess
from tests.integration.harness import base, netns
from tests.integration.test_rules_file import *
class T(RulesFileTest):
    def test_x(self):
        path = os.path.join(self.topo.tmp, "rules-a.yaml")
        with open(path, "w") as f:
            f.write(V1)
        p = self.rules_proxy(path)
        print(self.status(p, "alpha", ALPHA_TOKEN, "http://allowed.test/"))
        print(self.status(p, "beta", BETA_TOKEN, "http://third.test/"))
        print(self.status(p, "beta", BETA_TOKEN, "http://dual.test/"))
        with open(path, "w") as f:   # in place
            f.write(V2)
        time.sleep(1)
        print(p.stderr()[-300:])
if __name__ == "__main__":
    import sys; sys.argv[1:] = ["T.test_x"]
    base.main()
