"""The machine core: a prepared program, the SIMT scheduler, registers,
barriers, calls and the sanitizer hooks."""
