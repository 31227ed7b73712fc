"""depthcert.interop: models from other tools, read into depthcert's exact model classes.

    tracr_import.py  tracr's compiled RASP programs -> Model (weights as the rationals they are)
    transformerlens.py  TransformerLens checkpoints <-> Model (float32 weights read as the exact dyadics they are)
    checkpoint_files.py safetensors / torch checkpoint files read and written (numpy; torch only for .pt)

Importers and exporters of other formats go here.  They build
models with checkers/ and may use constructions/; commands in depthcert/cli/ call them.
"""
