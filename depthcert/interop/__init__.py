"""depthcert.interop: models from other tools, read into depthcert's exact model classes.

    tracr_import.py  tracr's compiled RASP programs -> Model (weights as the rationals they are)

Importers and exporters of other formats (TransformerLens, state dicts) go here.  They build
models with checkers/ and may use constructions/; commands in depthcert/cli/ call them.
"""
