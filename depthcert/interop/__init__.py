"""Importers and exporters between depthcert's exact models and other libraries' models."""
