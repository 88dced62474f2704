"""The built-in policies, one module each (`adaptspec.control.policy` re-exports them and builds one from config):

    common     what they share: healthy workers, the least loaded, who offers a proposer, estimates
    static     Static
    threshold  Threshold
    goodput    the cost-model policies' base (CostModelPolicy) and Goodput
    batchplan  the base's batch-wide gamma planning (one gamma per pass group, sunk passes, class mix)
    bandit     Bandit
"""
