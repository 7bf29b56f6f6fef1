"""The emulator's memory: address spaces and generic addressing
(:mod:`.spaces`), tensor maps (:mod:`.tensormap`)."""
