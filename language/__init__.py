"""Language models for the paper's positive control: a BERT-style encoder (masked language modelling) and a
GPT-style decoder of the same size, trained on English prose that installs with the project (docstrings of the
Python standard library and the project's dependencies), with the query-key inits the paper compares."""
