"""The paper's experiments, one small module each (issue: reproduce Tables 1-6, Figures 2-3, section 4.5)."""
