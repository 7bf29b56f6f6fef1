"""Numbers: the float formats (:mod:`.formats`), exact float arithmetic
(:mod:`.arith`), conversions and rounding (:mod:`.convert`), register bits and
typed values (:mod:`.values`, :mod:`.b128`)."""
