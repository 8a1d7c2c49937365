// libraio.so is raio_core linked whole; this file gives the target a source.
