"""The marks a test carries and what they mean: names (recognised without importing the rest),
argument signatures and evaluation against a registry, ``when=`` conditions, expectations
(``skip_on`` / ``xfail_on``), tolerances, hardware classes and a test's classification.

Used by the pytest session and by the unittest bridge alike; never imports pytest's session glue."""
