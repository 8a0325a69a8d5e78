"""Sentences that touch every lazily built registry of a domain's validators (the ICD-10-CM index, ISIN and
IBAN checks, citation parsing, the drug dictionary consulted
only for drug names the KG does not know), so a process builds them before it serves, not inside its first request."""

WARM_UP_TEXTS = {
    "medical": "Metformin 500 mg twice daily treats type 2 diabetes (ICD-10-CM E11.9). "
               "Zorvatrexin 20 mg daily is also prescribed. For type 2 diabetes without complications, bill E11.9.",
    "finance": "Apple's ISIN is US0378331005. The IBAN DE89 3704 0044 0532 0130 00 belongs to Commerzbank.",
    # the district-court parenthetical reaches courts-db's regexes (thousands, compiled on first use: ~0.7 s, and
    # several request threads compiling them at once under load); a landmark case in a reporter its court does not
    # publish in reaches the court records by id (courts-db's JSON parsed again: ~5 MB kept, built mid-traffic before)
    "legal": "In Brown v. Board of Education, 347 U.S. 483 (1954), the Court ruled. See 42 U.S.C. § 1983. "
             "Compare Smith v. Jones, 123 F. Supp. 456 (S.D.N.Y. 1997). Brown v. Board of Education, 347 F.2d 483.",
}
