// libraio.so is the internal libraries linked whole (src/raio/CMakeLists.txt); this file
// gives the target a source.
