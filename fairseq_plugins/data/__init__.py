"""Datasets the tasks load at training time (syntax hints). Tooling (the generated
data sets of the demo and the tests) lives in fairseq_plugins.cli, which this
package never imports."""
